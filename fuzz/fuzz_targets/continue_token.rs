//! Any continue token: decode or an error; a decoded start key never escapes the list's
//! prefix, and re-encoding a decoded token decodes to the same position.
#![no_main]
use libfuzzer_sys::fuzz_target;
use listwatch_core::ContinueToken;

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    for prefix in ["", "ns-1/"] {
        if let Ok(t) = ContinueToken::decode(token, prefix) {
            assert!(t.start_key.starts_with(prefix), "escaped the prefix: {t:?}");
            assert!(!t.start_key.contains(".."), "{t:?}");
            if t.rv > 0 {
                let again = ContinueToken::encode(
                    t.rv,
                    prefix,
                    t.start_key.trim_end_matches('\0'),
                );
                let t2 = ContinueToken::decode(&again, prefix).expect("re-encoded token decodes");
                assert_eq!(t2.rv, t.rv);
            }
        }
    }
    // The base64 codec round-trips any bytes.
    let enc = listwatch_core::continue_token::base64url_encode(data);
    assert_eq!(
        listwatch_core::continue_token::base64url_decode(&enc).expect("decodes"),
        data
    );
});
