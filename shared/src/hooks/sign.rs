//! Signatures: `X-Weft-Signature: sha256=<hex>` where `<hex>` is the lowercase hex
//! HMAC-SHA256 of the exact request body, keyed with the definition's `hooks.secret`.
//! A receiver recomputes it over the raw body it got and compares in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The signature header's value for `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex(&mac(secret, body)))
}

/// Whether `header` (an `X-Weft-Signature` value) is the signature of `body` under
/// `secret`; compares in constant time.
pub fn verify(secret: &str, body: &[u8], header: &str) -> bool {
    let Some(hex_sig) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Some(given) = unhex(hex_sig) else {
        return false;
    };
    let mut m = new_mac(secret);
    m.update(body);
    m.verify_slice(&given).is_ok()
}

fn new_mac(secret: &str) -> Hmac<Sha256> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

fn mac(secret: &str, body: &[u8]) -> Vec<u8> {
    let mut m = new_mac(secret);
    m.update(body);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_rfc_4231_vector_and_verifies() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let sig = signature("Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(verify("Jefe", b"what do ya want for nothing?", &sig));
        assert!(!verify("Jefe", b"what do ya want for nothing!", &sig));
        assert!(!verify("jefe", b"what do ya want for nothing?", &sig));
        assert!(!verify(
            "Jefe",
            b"what do ya want for nothing?",
            "sha256=zz"
        ));
        assert!(!verify("Jefe", b"what do ya want for nothing?", &sig[7..]));
    }
}
