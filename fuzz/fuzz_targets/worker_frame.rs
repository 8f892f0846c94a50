//! Fuzzes the worker-protocol decoder: `protocol::Frame::decode` on any line never panics, and a
//! frame it accepts encodes to a line that decodes to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::Frame;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    if let Ok(frame) = Frame::decode(&line) {
        let again = frame.encode();
        let back = Frame::decode(again.trim_end_matches('\n')).expect("an encoded frame decodes");
        assert_eq!(back, frame, "the frame round-trips");
    }
});
