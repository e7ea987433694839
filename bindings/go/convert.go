package infer

/*
#include <infer/infer.h>
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"
)

// Checked conversions of Go values to the C types of infer.h. A Go int is 64
// bits and C.int32_t(v) keeps its low 32 (2^40 becomes 0), and C.CString
// copies a string with a NUL byte that C then reads as ending there. Every
// value the binding passes to libinfer that is wider than its C type goes
// through one of these first, so one that does not fit is refused with an
// error naming the parameter (errors.Is(err, ErrInvalidArgument)) instead of
// reaching C changed.

// argError is the binding's own refusal of a parameter, before any C call.
func argError(op, format string, args ...interface{}) error {
	return &Error{Op: op, Status: StatusInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// cInt32 is v as an int32_t, or an error naming the parameter.
func cInt32(op, name string, v int) (C.int32_t, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, argError(op, "%s = %d does not fit the C type int32 [%d, %d]", name, v,
			math.MinInt32, math.MaxInt32)
	}
	return C.int32_t(v), nil
}

// cString is s as a C string (free it with C.free), or an error naming the
// parameter when s holds a NUL byte (C would read it as ending there).
func cString(op, name, s string) (*C.char, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, argError(op, "%s contains a NUL byte at offset %d (a C string would end there)", name, i)
	}
	return C.CString(s), nil
}

// timeoutMs is a wait as infer.h's int32 milliseconds: < 0 no limit; a wait
// longer than int32 milliseconds (24.8 days) is no limit too.
func timeoutMs(d time.Duration) C.int32_t {
	if d < 0 || d/time.Millisecond >= math.MaxInt32 {
		return -1
	}
	return C.int32_t(d / time.Millisecond)
}

// cBytes copies s into C memory allocated by alloc (NUL-terminated; s may
// hold NUL bytes, its length is passed beside it).
func cBytes(alloc func(int) unsafe.Pointer, s string) *C.char {
	p := (*C.char)(alloc(len(s) + 1))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(p)), len(s)), s)
	return p
}
