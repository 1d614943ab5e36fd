//! The `.capsule.md` reader on arbitrary text. What it accepts, the writer writes back, and
//! that text reads back and writes to the same bytes (export → load → export is stable).
#![no_main]

use libfuzzer_sys::fuzz_target;
use soba_core::capsule::portable::{parse, write};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = parse(text) else {
        return;
    };
    let exported = write(&parsed.capsule).text;
    let again = parse(&exported)
        .unwrap_or_else(|e| panic!("the writer's own output does not read back: {e}\n{exported}"));
    assert_eq!(
        write(&again.capsule).text,
        exported,
        "export → load → export changed the bytes"
    );
});
