// Synthetic models: random-weight GGUF files with the exact shapes of real
// ones, so speed can be measured without downloading weights.
//
// Presets (shapes from the published configs); every one is an architecture
// this build runs, so each written file loads (a preset for a new
// architecture comes with that architecture). Real shapes, for benchmarks:
//   tinyllama-1.1b  llama   dim 2048, 22 layers, 32 heads, 4 kv heads, ffn 5632, vocab 32000
//   llama-2-7b      llama   dim 4096, 32 layers, 32 heads, 32 kv heads, ffn 11008, vocab 32000
//   llama-3-8b      llama   dim 4096, 32 layers, 32 heads, 8 kv heads, ffn 14336, vocab 128256, rope base 500000
//   llama-3.2-1b    llama   dim 2048, 16 layers, 32/8 heads, ffn 8192, vocab 128256, llama3 rope x32, tied
//   mistral-7b      llama   dim 4096, 32 layers, 32/8 heads, ffn 14336, vocab 32000, sliding window 4096
//   qwen2.5-0.5b    qwen2   dim 896, 24 layers, 14/2 heads, ffn 4864, vocab 151936, QKV bias, tied
//   qwen3-0.6b      qwen3   dim 1024, 28 layers, 16/8 heads of 128, ffn 3072, vocab 151936, q/k norm, tied
//   phi3-mini       phi3    dim 3072, 32 layers, 32/32 heads, ffn 8192, vocab 32064, fused qkv and gate+up
//   gemma-2b        gemma   dim 2048, 18 layers, 8/1 heads of 256, ffn 16384, vocab 256000, tied
//   gemma2-2b       gemma2  dim 2304, 26 layers, 8/4 heads of 256, ffn 9216, vocab 256000, window 4096, soft-caps
//   mixtral-mini    llama   dim 1024, 8 layers, 16/4 heads, 8 experts of ffn 3584, top-2, vocab 32000,
//                           rope base 1e6: Mixtral's proportions at a size this machine holds (MoE benchmarks)
//   mixtral-mini-dense llama  mixtral-mini with one dense FFN of 8 x 3584: as many parameters, all read per token
// Small shapes, for tests (tests/ref/arch_ref.py checks our logits on them):
//   tiny            llama   dim 64, 2 layers, 4 heads, 2 kv heads, ffn 160, vocab 512
//   tiny-llama3, tiny-mistral, tiny-qwen2, tiny-qwen3, tiny-phi3, tiny-gemma, tiny-gemma2: each
//   architecture with every particular switched on (llama3 rope, window 20, biases, q/k norm with
//   heads of 32, long-rope factors, MQA, alternating windows and soft-caps small enough to bite).
//   tiny-chat       qwen2   tiny-qwen2's shape with a trained context of 4096 and what a chat model
//                           carries: a byte-level BPE vocabulary of 1024 (Qwen2.5's layout: the 256
//                           bytes in GPT-2's alphabet, merges, then <|endoftext|> <|im_start|>
//                           <|im_end|> <tool_call> </tool_call>; eos <|im_end|>, no BOS; Qwen2's
//                           pre-tokenizer split without its NFC normalization, so any text
//                           round-trips) and a ChatML
//                           chat template with tools (Hermes-style <tool_call> JSON), written here.
//                           Its output is noise, but `infer serve` and clients can run chats and
//                           tool calls against it end to end.
//   mixtral-tiny    llama   tiny's shape (test std and norms) with a mixture of 4 experts of ffn 160, top-2
//                           (tests/ref/moe_ref.py checks our logits on it)
// State-space models (tests/ref/ssm_ref.py checks our logits on the tiny ones; model/mamba.h):
//   tiny-mamba      mamba   dim 64, 3 layers, d_inner 128, d_state 16, d_conv 4, dt_rank 4, vocab 512
//   tiny-mamba2     mamba2  dim 64, 3 layers, d_inner 128, 8 heads of 16, 2 groups, d_state 16, d_conv 4
//   tiny-jamba      jamba   dim 64, 5 layers: attention (4/2 heads, no rope) on layers 1 and 4, Mamba-1
//                           (tiny-mamba's mixer with its dt/B/C norms) on the others; mixtures of 4
//                           experts of ffn 160, top-2, on odd layers, dense FFNs of 160 on even ones
//   mamba-130m      mamba   dim 768, 24 layers, d_inner 1536, d_state 16, dt_rank 48, d_conv 4,
//                           vocab 50280, tied: state-spaces/mamba-130m's shape, for benchmarks
//   mamba2-130m     mamba2  dim 768, 24 layers, d_inner 1536, 24 heads of 64, 1 group, d_state 128,
//                           vocab 50280, tied: state-spaces/mamba2-130m's shape
// Their weights are random but shaped like a trained model's: A = -exp(A_log) with A_log = log(1..d_state)
// per channel (Mamba-1) or log of 1..16 across the heads (Mamba-2), dt_bias = softplus^-1 of a dt
// log-spaced in [1e-3, 1e-1] across the channels, D = 1, conv taps of std 0.3; so the recurrence is
// stable and decays at many time scales.
// Embedding models (tests/ref/embed_ref.py checks our embeddings on the tiny ones; test std,
// random LayerNorm weights and biases, a WordPiece vocabulary for the encoders):
//   tiny-bert        bert        dim 64, 2 layers, 4 heads, ffn 128, ctx 128, vocab 1000, pooling mean
//   tiny-bert-rerank bert        tiny-bert with a classifier head (cls.weight/.bias, a pooler with tanh,
//                                then cls.output.weight/.bias, 1 output), pooling rank
//   tiny-nomic-bert  nomic-bert  dim 64, 2 layers, 4 heads, ffn 128, ctx 128, vocab 1000, rope base 1000,
//                                fused QKV and a SwiGLU FFN without biases, pooling mean
//   tiny-qwen3-embed qwen3       tiny-qwen3's shape and vocabulary with pooling last (causal, as
//                                Qwen3-Embedding: the final-norm hidden state of the last token)
//   bge-small        bert        dim 384, 12 layers, 12 heads, ffn 1536, ctx 512, vocab 30522, pooling cls:
//                                bge-small-en-v1.5's shape, for benchmarks
// The encoders write the GGUF layout of converted BERT / nomic-bert files: <arch>.attention.causal
// false, <arch>.attention.layer_norm_epsilon, <arch>.pooling_type, token_types.weight [n_embd, 2],
// token_embd_norm, position_embd (bert only), per layer attn_q/k/v (+bias) or attn_qkv,
// attn_output, attn_output_norm, ffn_up (+ffn_gate), ffn_down, layer_output_norm (weight and bias);
// no output norm or head. Biases exist in bert only (nomic-bert has none but its LayerNorms').
//
// Mixture-of-experts presets (n_expert > 0) write Mixtral's GGUF layout: the
// router blk.N.ffn_gate_inp.weight [n_embd, E], kept F32 as the quantizers of
// published files leave it, and 3-D experts blk.N.ffn_{gate,up}_exps.weight
// [n_embd, n_ff, E] and ffn_down_exps.weight [n_ff, n_embd, E] in the weight type.
//
// Weights are uniform random with std 0.02 (projections into the residual
// stream scaled by 1/sqrt(2 * layers), norms 1), so activations stay finite
// through every layer. The tiny-ARCH presets use a larger std (weight_std)
// so that logits spread and greedy choices are clear, and random norms,
// biases and rope factors (random_norms), so that each one matters. The
// vocabulary is SentencePiece-style with byte fallback (<unk>, <s>, </s>,
// the 256 byte tokens, then letter strings), so any text tokenizes.
// Generation streams tensor by tensor (a few rows at a time), so a 7B/8B
// file never needs its size in memory.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace infer {

struct SynthPreset {
  const char* name;
  const char* arch;
  int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base, rms_eps;
  int head_dim = 0;            // 0: n_embd / n_head
  int sliding_window = 0;      // llama: every layer; gemma2: even layers
  bool tied = false;           // no output.weight
  const char* rope_scaling = "";  // "", "linear", "llama3" (rope_freqs.weight too), "longrope"
  float rope_factor = 1.0f;    // linear / llama3 factor
  int rope_orig_ctx = 0;       // llama3 / longrope original context length
  float attn_softcap = 0.0f, final_softcap = 0.0f;  // gemma2
  float weight_std = 0.02f;
  bool random_norms = false;   // norms 1 + U(+-0.2), biases and rope factors random
  int n_expert = 0, n_expert_used = 0;  // mixture of experts (llama: Mixtral's layout); 0: a dense FFN
  bool chatml_bpe = false;     // byte-level BPE vocabulary and a ChatML template with tools (synth_chatml_bpe_vocab)
  // Embedding models: bert and nomic-bert (LayerNorm epsilon in rms_eps) carry
  // a WordPiece vocabulary (synth_wordpiece_vocab); decoders may say how to pool.
  int pooling = -1;            // <arch>.pooling_type (0 none, 1 mean, 2 cls, 3 last, 4 rank); -1: not written
  int n_cls_out = 0;           // bert reranker: the classifier head's outputs (cls.* tensors); 0: none
  // State-space presets (mamba, mamba2, jamba: model/mamba.h). mamba2: dt_rank is the head count.
  int ssm_d_inner = 0, ssm_d_state = 0, ssm_d_conv = 4, ssm_dt_rank = 0, ssm_n_group = 1;
  // jamba: layer l attends when l >= attn_offset and (l - attn_offset) % attn_period == 0 (a Mamba
  // layer otherwise); its FFN is a mixture of experts likewise by expert_period / expert_offset.
  int attn_period = 0, attn_offset = 0, expert_period = 0, expert_offset = 0;
};

const std::vector<SynthPreset>& synth_presets();
// The vocabulary of the chatml_bpe presets, n_vocab tokens (at least 261):
// the 256 bytes in GPT-2's byte-level alphabet (token i is byte i), merges
// that build common English words, JSON and tool-call pieces and runs of
// spaces (then letter pairs while room is left), and last the five special
// tokens. Every text tokenizes (any byte is a token) and decodes back.
struct SynthBpeVocab {
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
};
SynthBpeVocab synth_chatml_bpe_vocab(int n_vocab);
// The Jinja chat template of the chatml_bpe presets (ChatML with tools).
const char* synth_chatml_template();
// The WordPiece vocabulary of the bert and nomic-bert presets, n_vocab tokens
// (at least 300): [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4, control), the
// ASCII punctuation, letters and digits, their "##" continuations, then
// English words and "##" suffixes, then letter strings and their "##" forms
// while room is left. Lowercase (an uncased model's), every entry distinct.
struct SynthWordPieceVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // 3 control (the five specials), 1 normal
};
SynthWordPieceVocab synth_wordpiece_vocab(int n_vocab);
const SynthPreset* find_synth_preset(const std::string& name);

struct SynthOptions {
  DType type = DType::F16;  // weight matrices (fallbacks as for quantize)
  uint64_t seed = 1;
  int n_threads = 0;
  std::function<void(double, const std::string&)> progress;
  std::function<void(const std::string&)> note;
};

// Writes the preset's model to path. Returns the file size in bytes.
uint64_t write_synth_model(const SynthPreset& p, const std::string& path, const SynthOptions& o);

}  // namespace infer

namespace infer {

// A large model that computes what a small trained one computes, plus noise:
// the target of speculative decoding benchmarks (stories260K grown into
// TinyLlama's shape costs TinyLlama's time per token while agreeing with
// stories260K as often as the noise allows). The small model (GGUF, llama)
// is embedded by zero padding: dims [0, d) of the residual stream; query head
// h at the big head of the same GQA group ((h / g) * G + h % g, g and G the
// group sizes); rotary pair p of a head at pair p * HD / hd (the same
// frequency); Q scaled by sqrt(HD / hd) for the softmax scale; RMSNorm
// weights scaled by sqrt(d / D) with epsilon scaled by d / D (exact for the
// zero-padded stream); the small layers first, then layers whose output
// projections are zero. Then Gaussian noise of std `noise` is added to every
// element of every matrix (not the norms), seeded by o.seed. Needs the big
// shape to hold the small one: d <= D, L <= L', ff <= FF, n_head_kv <=
// n_head_kv', g <= G and hd dividing HD; the vocabulary (and its size) is
// the small model's, whatever the preset says. Returns the file size.
uint64_t write_grown_model(const std::string& small_path, const SynthPreset& shape, float noise,
                           const std::string& path, const SynthOptions& o);

}  // namespace infer
