package infer

/*
#include <infer/infer.h>
*/
import "C"

import (
	"reflect"
	"strings"
)

// cLayouts reports the size and field offsets of every infer.h struct as
// cgo sees them ("STRUCT sizeof", "STRUCT.FIELD"), for the layout test.
func cLayouts() map[string]uintptr {
	out := map[string]uintptr{}
	for name, v := range map[string]interface{}{
		"infer_model_params": C.infer_model_params{}, "infer_model_info": C.infer_model_info{},
		"infer_tensor_info": C.infer_tensor_info{}, "infer_engine_params": C.infer_engine_params{},
		"infer_sampling_params": C.infer_sampling_params{}, "infer_request_params": C.infer_request_params{},
		"infer_request_stats": C.infer_request_stats{}, "infer_engine_stats": C.infer_engine_stats{},
		"infer_chat_message": C.infer_chat_message{}, "infer_quantize_params": C.infer_quantize_params{},
		"infer_quantize_result": C.infer_quantize_result{}, "infer_synth_params": C.infer_synth_params{},
		"infer_perplexity_result": C.infer_perplexity_result{}, "infer_perplexity_params": C.infer_perplexity_params{},
		"infer_bench_params": C.infer_bench_params{}, "infer_bench_result": C.infer_bench_result{},
		"infer_embed_params": C.infer_embed_params{},
	} {
		t := reflect.TypeOf(v)
		out[name+" sizeof"] = t.Size()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Name == "_" {
				continue // padding cgo inserts
			}
			out[name+"."+strings.TrimPrefix(f.Name, "_")] = f.Offset
		}
	}
	for name, size := range map[string]uintptr{
		"infer_status": reflect.TypeOf(C.infer_status(0)).Size(), "infer_log_level": reflect.TypeOf(C.infer_log_level(0)).Size(),
		"infer_backend": reflect.TypeOf(C.infer_backend(0)).Size(), "infer_kv_type": reflect.TypeOf(C.infer_kv_type(0)).Size(),
		"infer_policy": reflect.TypeOf(C.infer_policy(0)).Size(), "infer_spec_method": reflect.TypeOf(C.infer_spec_method(0)).Size(), "infer_finish_reason": reflect.TypeOf(C.infer_finish_reason(0)).Size(),
		"infer_quant_method": reflect.TypeOf(C.infer_quant_method(0)).Size(), "infer_pooling": reflect.TypeOf(C.infer_pooling(0)).Size(),
	} {
		out[name+" enum"] = size
	}
	out["version_number"] = uintptr(C.INFER_VERSION_NUMBER)
	return out
}
