//! Checks and conversions at the C boundary, and the C string helpers.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::time::Duration;

use crate::{sys, Error, Result, Status};

pub(crate) fn check(code: i32) -> Result<()> {
    if code == sys::INFER_OK {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}

pub(crate) unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

// The public types of this binding are the C types of infer.h (i32, u64,
// f32, usize), so no integer is narrowed on its way to C and no `as` cast
// may narrow one. What remains to check is below: a string with a NUL byte
// that C would read as ending there, and a wait longer than infer.h's int32
// milliseconds.

/// `s` as a C string; a NUL byte is refused with an error naming `name`.
pub(crate) fn cstring(s: &str, name: &str) -> Result<CString> {
    CString::new(s).map_err(|e| {
        Error::new(Status::InvalidArgument,
                   format!("{} contains a NUL byte at offset {} (a C string would end there)", name, e.nul_position()))
    })
}

/// A wait as infer.h's int32 milliseconds: None is no limit (-1), and so is
/// a wait longer than i32::MAX milliseconds (24.8 days), never a shorter one.
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => i32::try_from(d.as_millis()).ok().filter(|&ms| ms < i32::MAX).unwrap_or(-1),
    }
}

/// Runs the grow-and-retry convention of libinfer's string outputs.
pub(crate) fn sized_string(mut call: impl FnMut(*mut c_char, usize, *mut usize) -> i32) -> Result<String> {
    let mut size = 256usize;
    loop {
        let mut buf = vec![0u8; size];
        let mut needed = 0usize;
        let st = call(buf.as_mut_ptr() as *mut c_char, size, &mut needed);
        if st == sys::INFER_ERR_BUFFER_TOO_SMALL && needed > size {
            size = needed;
            continue;
        }
        check(st)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        return String::from_utf8(buf).map_err(|e| Error::new(Status::Internal, e.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_longer_than_int32_ms_are_no_limit() {
        assert_eq!(timeout_ms(None), -1);
        assert_eq!(timeout_ms(Some(Duration::MAX)), -1);
        assert_eq!(timeout_ms(Some(Duration::from_millis(i32::MAX as u64))), -1);
        assert_eq!(timeout_ms(Some(Duration::from_millis(1 << 32))), -1);
        assert_eq!(timeout_ms(Some(Duration::from_millis(1500))), 1500);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 0);
    }

    #[test]
    fn nul_bytes_are_refused_by_name() {
        let e = cstring("a\0b", "stop[2]").unwrap_err();
        assert_eq!(e.status, Status::InvalidArgument);
        assert!(e.message.contains("stop[2] contains a NUL byte at offset 1"), "{}", e.message);
    }
}
