//! Every kind of object configsum tracks, declared once, in [`DECLARED`]: a
//! ConfigMap ([`config_map`]) and a Secret ([`secret`]).
//!
//! A row says everything that differs between them: the words used in
//! `track`/`ignore` and annotation keys, the API resource the webhook reads
//! and the controller watches (hence their RBAC), which fields hold the data
//! and how they are encoded, whether the digest is keyed, and the places in a
//! pod spec that reference the object. The reference walk (`core::refs`), the
//! annotation names, the digest, both lookup sources and the controller's
//! watches read this table and never name a kind themselves.
//!
//! What a row says is [`row`]'s; the rows are `config_map.rs` and `secret.rs`. A new kind of
//! object is a new [`ObjectKind`] variant, a module here with its row, and the row in
//! [`DECLARED`]; docs/extending.md walks through it.
//!
//! The third tracked input, the image behind a floating tag ([`image`]), is
//! keyed by container rather than by object and resolved from a registry; it
//! has a module of its own shape. The fourth, another workload's pod template
//! ([`workload_template`], workloads that roll together), is being built: its
//! digest is here. The fifth, a SecretProviderClass's rotations ([`secret_provider_class`]),
//! is named by a CSI volume and digested from what the Secrets Store CSI driver reports.

mod config_map;
pub mod image;
pub mod row;
mod secret;
pub mod secret_provider_class;
pub mod workload_template;

use super::model::object_ref::ObjectKind;
pub use row::{DataField, Encoding, InvalidData, ObjectInput, ReferenceSites, Site, SiteKeys};

/// Every kind of tracked object, in [`ObjectKind`] order.
pub const DECLARED: [ObjectInput; 2] = [config_map::CONFIG_MAP, secret::SECRET];

// The table is indexed by the variant: a row out of place fails the build.
const _: () = {
    let mut i = 0;
    while i < DECLARED.len() {
        assert!(DECLARED[i].kind as usize == i, "DECLARED is not in ObjectKind order");
        i += 1;
    }
};

impl ObjectKind {
    /// This kind's row of [`DECLARED`].
    pub fn input(self) -> &'static ObjectInput {
        &DECLARED[self as usize]
    }

    /// Every declared kind, in order.
    pub fn all() -> impl Iterator<Item = ObjectKind> {
        DECLARED.iter().map(|input| input.kind)
    }

    /// The kind whose Kubernetes kind is `api_kind` (`"Secret"`).
    pub fn from_api_kind(api_kind: &str) -> Option<ObjectKind> {
        DECLARED.iter().find(|input| input.api_kind == api_kind).map(|input| input.kind)
    }

    /// The kind whose word is `word` (`"secret"`).
    pub fn from_word(word: &str) -> Option<ObjectKind> {
        DECLARED.iter().find(|input| input.word == word).map(|input| input.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::object_content::ObjectContent;
    use std::collections::BTreeMap;

    fn entries(content: &ObjectContent) -> Vec<(&str, &[u8])> {
        content.entries().collect()
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn words_and_api_kinds_name_their_rows() {
        for kind in ObjectKind::all() {
            let input = kind.input();
            assert_eq!(ObjectKind::from_word(input.word), Some(kind));
            assert_eq!(ObjectKind::from_api_kind(input.api_kind), Some(kind));
            assert_eq!(input.word, input.api_kind.to_lowercase());
            assert_eq!(input.resource, format!("{}s", input.word));
        }
        assert_eq!(ObjectKind::from_word("ConfigMap"), None);
        assert_eq!(ObjectKind::from_api_kind("configmap"), None);
    }

    #[test]
    fn a_config_map_folds_binary_data_over_data() {
        let fields = BTreeMap::from([
            ("data", map(&[("a", "text"), ("b", "old")])),
            ("binaryData", map(&[("b", "bmV3"), ("c", "AAE=")])),
            ("stringData", map(&[("a", "ignored")])),
        ]);
        let content =
            ObjectKind::ConfigMap.input().content(|f| fields.get(f).cloned()).expect("valid");
        let expected = ObjectContent::from_entries(BTreeMap::from([
            ("a".to_owned(), b"text".to_vec()),
            ("b".to_owned(), b"new".to_vec()),
            ("c".to_owned(), vec![0, 1]),
        ]));
        assert_eq!(entries(&content), entries(&expected));
    }

    #[test]
    fn a_secret_decodes_data_and_folds_string_data_over_it() {
        let fields = BTreeMap::from([
            ("data", map(&[("user", "YWRtaW4="), ("pass", "b2xk")])),
            ("stringData", map(&[("pass", "new")])),
            ("binaryData", map(&[("x", "ignored")])),
        ]);
        let content =
            ObjectKind::Secret.input().content(|f| fields.get(f).cloned()).expect("valid");
        let expected = ObjectContent::from_entries(BTreeMap::from([
            ("user".to_owned(), b"admin".to_vec()),
            ("pass".to_owned(), b"new".to_vec()),
        ]));
        assert_eq!(entries(&content), entries(&expected));
    }

    #[test]
    fn invalid_base64_names_the_key_and_never_the_value() {
        let fields = BTreeMap::from([("data", map(&[("token", "s3cr3t-not-base64!")]))]);
        let error = ObjectKind::Secret.input().content(|f| fields.get(f).cloned()).unwrap_err();
        assert_eq!(error, InvalidData { field: "data", key: "token".to_owned() });
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }
}
