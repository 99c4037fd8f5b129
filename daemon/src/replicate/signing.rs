//! Authenticated copies (`replicate.signing_key_file`). A remote manifest lists each
//! object's hash, but it lives in the same bucket as the objects: whoever can write
//! the bucket can change both together, and a Hugging Face checkpoint's pickles
//! (`optimizer.pt`, `rng_state.pth`) run code when a resume loads them. With a key,
//! each remote manifest carries a MAC over its contents (BLAKE3 in keyed mode, the key
//! derived from the file's bytes), so its hashes, and through them every object, are
//! the ones a holder of the key wrote; a restore refuses a manifest without one, or
//! with one that does not verify. Without a key the bucket is trusted as it is.

use std::path::Path;

use super::manifest::RemoteManifest;

/// What the signature starts with: the MAC's algorithm.
const SCHEME: &str = "blake3-keyed:";
/// BLAKE3's key-derivation context: a key used here is used for nothing else.
const CONTEXT: &str = "lavender 2026-12 remote checkpoint manifest MAC";
/// Fewer bytes than this in the key file are refused: too easy to guess.
pub const MIN_KEY_BYTES: usize = 32;

/// The key of `replicate.signing_key_file`.
pub struct SigningKey([u8; 32]);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

impl SigningKey {
    /// The key derived from the bytes of `file` (surrounding whitespace dropped, so
    /// a key written by `base64` with its newline is the same key everywhere).
    pub fn load(file: &Path) -> Result<SigningKey, String> {
        let bytes =
            std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let secret = bytes.trim_ascii();
        if secret.len() < MIN_KEY_BYTES {
            return Err(format!(
                "{} holds {} bytes; write at least {MIN_KEY_BYTES} random ones (`head -c 32 /dev/urandom | base64 > {}`) and copy the same file to every machine that restores",
                file.display(),
                secret.len(),
                file.display()
            ));
        }
        Ok(SigningKey(blake3::derive_key(CONTEXT, secret)))
    }

    fn mac(&self, m: &RemoteManifest) -> blake3::Hash {
        let unsigned = RemoteManifest {
            signature: None,
            ..m.clone()
        };
        let bytes = serde_json::to_vec(&unsigned).expect("a manifest serializes");
        blake3::keyed_hash(&self.0, &bytes)
    }

    /// `m` with its signature set.
    pub fn sign(&self, mut m: RemoteManifest) -> RemoteManifest {
        m.signature = Some(format!("{SCHEME}{}", self.mac(&m).to_hex()));
        m
    }

    /// Whether `m` carries this key's signature over what it says.
    pub fn verify(&self, m: &RemoteManifest) -> Result<(), String> {
        let Some(signature) = &m.signature else {
            return Err("it is not signed, and replicate.signing_key_file is set".into());
        };
        let given = signature
            .strip_prefix(SCHEME)
            .and_then(|hex| blake3::Hash::from_hex(hex).ok())
            .ok_or_else(|| format!("its signature is not {SCHEME}<64 hex digits>"))?;
        // blake3::Hash compares in constant time.
        if given == self.mac(m) {
            Ok(())
        } else {
            Err("its signature does not verify with replicate.signing_key_file (altered in the bucket, or signed with another key)".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> SigningKey {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, text).unwrap();
        SigningKey::load(&file).unwrap()
    }

    fn manifest() -> RemoteManifest {
        super::super::manifest::tests::manifest(&["model.safetensors"])
    }

    #[test]
    fn a_signed_manifest_verifies_and_any_change_does_not() {
        let k = key(&"k".repeat(44));
        let signed = k.sign(manifest());
        // Through the bucket and back: the same bytes verify.
        let back: RemoteManifest =
            serde_json::from_slice(&serde_json::to_vec_pretty(&signed).unwrap()).unwrap();
        assert_eq!(k.verify(&back), Ok(()));
        assert_eq!(key(&format!("{}\n", "k".repeat(44))).verify(&back), Ok(()));

        let mut altered = back.clone();
        altered.files[0].hash = "cd".repeat(32);
        assert!(k.verify(&altered).unwrap_err().contains("does not verify"));
        let mut altered = back.clone();
        altered.step = 21;
        assert!(k.verify(&altered).is_err());
        assert!(key(&"j".repeat(44)).verify(&back).is_err(), "another key");
        assert!(k.verify(&manifest()).unwrap_err().contains("not signed"));
        let mut junk = back;
        junk.signature = Some("blake3-keyed:zz".into());
        assert!(k.verify(&junk).unwrap_err().contains("64 hex"));
    }

    #[test]
    fn a_short_key_is_refused_saying_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "secret\n").unwrap();
        let e = SigningKey::load(&file).unwrap_err();
        assert!(
            e.contains("holds 6 bytes") && e.contains("/dev/urandom"),
            "{e}"
        );
        assert!(!e.contains("secret"), "the key is never shown: {e}");
    }
}
