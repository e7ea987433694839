/* Prints the C compiler's layout of every struct the language bindings
 * mirror: "STRUCT sizeof N" then "STRUCT.FIELD OFFSET" lines, and the size of
 * every enum. The Python, Rust and Go tests compare their mirrors with it.
 * Regenerate the field list when infer.h gains a field (and add the field to
 * each binding). */
#include <infer/infer.h>
#include <stddef.h>
#include <stdio.h>

#define S(T) printf(#T " sizeof %zu\n", sizeof(T))
#define F(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
#define E(T) printf(#T " enum %zu\n", sizeof(T))

int main(void) {
  S(infer_model_params);
  F(infer_model_params, struct_size);
  F(infer_model_params, backend);
  F(infer_model_params, use_mmap);
  F(infer_model_params, vocab_only);
  S(infer_model_info);
  F(infer_model_info, struct_size);
  F(infer_model_info, architecture);
  F(infer_model_info, name);
  F(infer_model_info, tokenizer);
  F(infer_model_info, n_vocab);
  F(infer_model_info, n_ctx_train);
  F(infer_model_info, n_embd);
  F(infer_model_info, n_layer);
  F(infer_model_info, n_head);
  F(infer_model_info, n_head_kv);
  F(infer_model_info, n_ff);
  F(infer_model_info, n_rot);
  F(infer_model_info, rope_freq_base);
  F(infer_model_info, rms_norm_eps);
  F(infer_model_info, n_params);
  F(infer_model_info, n_bytes);
  F(infer_model_info, n_tensors);
  F(infer_model_info, bos_token);
  F(infer_model_info, eos_token);
  F(infer_model_info, vocab_only);
  S(infer_tensor_info);
  F(infer_tensor_info, struct_size);
  F(infer_tensor_info, name);
  F(infer_tensor_info, type);
  F(infer_tensor_info, n_dims);
  F(infer_tensor_info, dims);
  F(infer_tensor_info, n_bytes);
  S(infer_engine_params);
  F(infer_engine_params, struct_size);
  F(infer_engine_params, n_threads);
  F(infer_engine_params, kv_budget_bytes);
  F(infer_engine_params, kv_blocks);
  F(infer_engine_params, kv_block_size);
  F(infer_engine_params, kv_type);
  F(infer_engine_params, max_seqs);
  F(infer_engine_params, max_batch_tokens);
  F(infer_engine_params, n_ctx);
  F(infer_engine_params, prefix_caching);
  F(infer_engine_params, host_kv_budget_bytes);
  F(infer_engine_params, policy);
  F(infer_engine_params, batch_timeout_ms);
  F(infer_engine_params, step_row_multiple);
  S(infer_sampling_params);
  F(infer_sampling_params, struct_size);
  F(infer_sampling_params, temperature);
  F(infer_sampling_params, top_k);
  F(infer_sampling_params, top_p);
  F(infer_sampling_params, min_p);
  F(infer_sampling_params, repeat_penalty);
  F(infer_sampling_params, frequency_penalty);
  F(infer_sampling_params, presence_penalty);
  F(infer_sampling_params, penalty_last_n);
  F(infer_sampling_params, seed);
  F(infer_sampling_params, logit_bias_tokens);
  F(infer_sampling_params, logit_bias_values);
  F(infer_sampling_params, n_logit_bias);
  S(infer_request_params);
  F(infer_request_params, struct_size);
  F(infer_request_params, prompt);
  F(infer_request_params, prompt_len);
  F(infer_request_params, prompt_tokens);
  F(infer_request_params, n_prompt_tokens);
  F(infer_request_params, add_bos);
  F(infer_request_params, parse_special);
  F(infer_request_params, max_tokens);
  F(infer_request_params, sampling);
  F(infer_request_params, stop);
  F(infer_request_params, n_stop);
  F(infer_request_params, ignore_eos);
  F(infer_request_params, on_token);
  F(infer_request_params, user_data);
  F(infer_request_params, logits);
  F(infer_request_params, no_prefix_cache);
  F(infer_request_params, cache_salt);
  F(infer_request_params, priority);
  S(infer_request_stats);
  F(infer_request_stats, struct_size);
  F(infer_request_stats, finish_reason);
  F(infer_request_stats, status);
  F(infer_request_stats, n_prompt_tokens);
  F(infer_request_stats, n_cached_tokens);
  F(infer_request_stats, n_generated_tokens);
  F(infer_request_stats, queue_ms);
  F(infer_request_stats, ttft_ms);
  F(infer_request_stats, tpot_ms);
  F(infer_request_stats, total_ms);
  F(infer_request_stats, prefill_tokens_per_s);
  F(infer_request_stats, decode_tokens_per_s);
  F(infer_request_stats, n_preemptions);
  S(infer_engine_stats);
  F(infer_engine_stats, struct_size);
  F(infer_engine_stats, n_running);
  F(infer_engine_stats, n_waiting);
  F(infer_engine_stats, kv_blocks_total);
  F(infer_engine_stats, kv_blocks_used);
  F(infer_engine_stats, kv_block_size);
  F(infer_engine_stats, kv_bytes_total);
  F(infer_engine_stats, kv_bytes_used);
  F(infer_engine_stats, n_steps);
  F(infer_engine_stats, n_prompt_tokens);
  F(infer_engine_stats, n_generated_tokens);
  F(infer_engine_stats, kv_blocks_free);
  F(infer_engine_stats, kv_blocks_cached);
  F(infer_engine_stats, host_kv_blocks_total);
  F(infer_engine_stats, host_kv_blocks_used);
  F(infer_engine_stats, prefix_query_tokens);
  F(infer_engine_stats, prefix_hit_tokens);
  F(infer_engine_stats, n_preemptions);
  F(infer_engine_stats, kv_evictions);
  F(infer_engine_stats, kv_type);
  F(infer_engine_stats, n_finished);
  F(infer_engine_stats, uptime_s);
  F(infer_engine_stats, generated_tokens_per_s);
  S(infer_chat_message);
  F(infer_chat_message, role);
  F(infer_chat_message, content);
  E(infer_status);
  E(infer_log_level);
  E(infer_backend);
  E(infer_kv_type);
  E(infer_policy);
  E(infer_finish_reason);
  E(infer_quant_method);
  printf("version_number %u\n", (unsigned)INFER_VERSION_NUMBER);
  return 0;
}
