//! Hostile AdmissionReview bodies for `tests/fuzz_review.rs`.
//!
//! A case is a handful of proptest-chosen parameters (cheap to generate and to
//! shrink); [`Case::build`] expands it into bytes, which may be megabytes. The
//! JSON is built as a [`J`] tree rather than a `serde_json::Value` because the
//! bodies must hold what `Value` cannot: duplicate keys, lone surrogate
//! escapes, invalid UTF-8, nesting past any recursion limit.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::sample::Index;

/// A JSON document under construction, possibly not valid JSON.
#[derive(Clone, Debug)]
pub enum J {
    Null,
    Bool(bool),
    /// Written verbatim: numbers, and anything else that is not a string.
    Lit(String),
    /// A string, escaped as JSON.
    Str(String),
    /// The bytes between the quotes, verbatim: `\ud800`, invalid UTF-8, raw control bytes.
    RawStr(Vec<u8>),
    Arr(Vec<J>),
    /// Members in order; keys are meant to be `Str` or `RawStr`, and may repeat.
    Obj(Vec<(J, J)>),
    /// `inner` inside `depth` arrays (`[[[…]]]`) or objects (`{"a":{"a":…}}`).
    Nest {
        depth: usize,
        object: bool,
        inner: Box<J>,
    },
    /// `elem` `count` times, comma-separated: a wide array without a wide tree.
    Repeat {
        count: usize,
        elem: Box<J>,
    },
}

pub fn s(text: impl Into<String>) -> J {
    J::Str(text.into())
}

pub fn obj<const N: usize>(members: [(&str, J); N]) -> J {
    J::Obj(members.into_iter().map(|(k, v)| (s(k), v)).collect())
}

impl J {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            J::Null => out.extend_from_slice(b"null"),
            J::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            J::Lit(text) => out.extend_from_slice(text.as_bytes()),
            J::Str(text) => serde_json::to_writer(&mut *out, text).expect("a string serialises"),
            J::RawStr(bytes) => {
                out.push(b'"');
                out.extend_from_slice(bytes);
                out.push(b'"');
            }
            J::Arr(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write(out);
                }
                out.push(b']');
            }
            J::Obj(members) => {
                out.push(b'{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    key.write(out);
                    out.push(b':');
                    value.write(out);
                }
                out.push(b'}');
            }
            J::Nest { depth, object, inner } => {
                let (open, close): (&[u8], &[u8]) =
                    if *object { (b"{\"a\":", b"}") } else { (b"[", b"]") };
                for _ in 0..*depth {
                    out.extend_from_slice(open);
                }
                inner.write(out);
                for _ in 0..*depth {
                    out.extend_from_slice(close);
                }
            }
            J::Repeat { count, elem } => {
                for i in 0..*count {
                    if i > 0 {
                        out.push(b',');
                    }
                    elem.write(out);
                }
            }
        }
    }

    /// The member `key` of an object (the first, if it repeats).
    pub fn get_mut(&mut self, key: &str) -> Option<&mut J> {
        let J::Obj(members) = self else { return None };
        members.iter_mut().find(|(k, _)| matches!(k, J::Str(name) if name == key)).map(|(_, v)| v)
    }

    /// The node at a JSON-pointer-like path of keys and array indexes.
    pub fn at_mut(&mut self, path: &str) -> Option<&mut J> {
        let mut node = self;
        for token in path.split('/').filter(|t| !t.is_empty()) {
            node = match node {
                J::Arr(items) => items.get_mut(token.parse::<usize>().ok()?)?,
                J::Obj(_) => node.get_mut(&token.replace("~1", "/"))?,
                _ => return None,
            };
        }
        Some(node)
    }

    fn count(&self) -> usize {
        1 + match self {
            J::Arr(items) => items.iter().map(J::count).sum(),
            J::Obj(members) => members.iter().map(|(k, v)| k.count() + v.count()).sum(),
            J::Nest { inner, .. } => inner.count(),
            // A repeated element is one node: changing it would change every copy.
            _ => 0,
        }
    }

    /// The `index`-th node in pre-order, keys included.
    fn nth_mut(&mut self, index: usize) -> Option<&mut J> {
        if index == 0 {
            return Some(self);
        }
        let mut index = index - 1;
        let children: Vec<&mut J> = match self {
            J::Arr(items) => items.iter_mut().collect(),
            J::Obj(members) => members.iter_mut().flat_map(|(k, v)| [k, v]).collect(),
            J::Nest { inner, .. } => vec![&mut **inner],
            _ => Vec::new(),
        };
        for child in children {
            let size = child.count();
            if index < size {
                return child.nth_mut(index);
            }
            index -= size;
        }
        None
    }
}

/// Strings no well-behaved client sends: `(raw JSON string content, valid Unicode)`.
/// Content is written between quotes verbatim, so escapes here are JSON escapes.
pub fn odd_string(index: usize) -> (Vec<u8>, bool) {
    let valid = |text: String| (text.into_bytes(), true);
    let invalid = |bytes: &[u8]| (bytes.to_vec(), false);
    match index % ODD_STRINGS {
        0 => valid(String::new()),
        1 => valid("\u{202E}gnirts-lrt\u{202C}".into()),
        2 => valid("\u{200F}\u{05D0}\u{05D1}\u{200E}".into()),
        3 => valid("e\u{0301}\u{0302}\u{0327}".into()),
        4 => valid(format!("z{}", "\u{0300}".repeat(10_000))),
        5 => valid("nul\\u0000byte".into()),
        6 => valid("\u{FEFF}bom".into()),
        7 => valid("\u{1F600}\u{1F3F3}\u{FE0F}\u{200D}\u{1F308}".into()),
        8 => valid("a/b~c~1/~0".into()),
        9 => valid("x".repeat(100_000)),
        10 => valid("\u{e9}".repeat(50_000)),
        11 => invalid(b"\\ud800"),
        12 => invalid(b"lone\\udc00low"),
        13 => invalid(b"\\ud800\\ud800"),
        14 => invalid(b"\xff"),
        15 => invalid(b"overlong\xc0\x80nul"),
        16 => invalid(b"\xed\xa0\x80"),
        17 => invalid(b"\xf4\x90\x80\x80"),
        18 => invalid(b"cut\xe2\x82"),
        19 => invalid(b"ctl\x01raw"),
        20 => invalid(b"bad\\x41escape"),
        21 => valid("configmap/a, secret/b, *".into()),
        22 => valid("\\u202e\\u200f".into()),
        23 => valid("\\uDBFF\\uDFFF".into()),
        24 => valid("\u{0085}\u{2028}\u{2029}".into()),
        25 => valid("\\n\\r\\t\\\"\\\\\\/".into()),
        _ => invalid(b"raw\x00nul"),
    }
}

pub const ODD_STRINGS: usize = 27;

pub fn odd(index: usize) -> J {
    J::RawStr(odd_string(index).0)
}

/// Odd strings that are still valid JSON strings of valid Unicode: these keep a
/// review well-formed, so the generators use them anywhere.
pub fn odd_valid(index: usize) -> J {
    J::RawStr(odd_valid_content(index))
}

/// Short valid odd strings, for the bulk generators: names, keys and tokens
/// repeated thousands of times (the long ones come as single hostile strings).
fn odd_valid_content(index: usize) -> Vec<u8> {
    let short: Vec<Vec<u8>> = (0..ODD_STRINGS)
        .map(odd_string)
        .filter(|(content, valid)| *valid && content.len() <= 64)
        .map(|(content, _)| content)
        .collect();
    short[index % short.len()].clone()
}

/// Values of the wrong type, or of no type at all.
pub fn junk(index: usize) -> J {
    match index % JUNK {
        0 => J::Null,
        1 => J::Bool(true),
        2 => J::Lit("0".into()),
        3 => J::Lit("-1".into()),
        4 => J::Lit("1.5e308".into()),
        5 => J::Lit("1e999".into()),
        6 => J::Lit("123456789012345678901234567890".into()),
        7 => s(""),
        8 => s("junk"),
        9 => J::Arr(Vec::new()),
        10 => J::Obj(Vec::new()),
        11 => J::Arr(vec![J::Null, J::Lit("1".into()), s("x")]),
        12 => obj([("a", J::Lit("1".into()))]),
        13 => s("y".repeat(1 << 16)),
        14 => J::Nest { depth: 200, object: false, inner: Box::new(J::Null) },
        15 => J::RawStr(b"\\ud800".to_vec()),
        16 => J::Lit("-0".into()),
        17 => J::Lit("tru".into()),
        _ => J::Lit(String::new()),
    }
}

pub const JUNK: usize = 19;

/// request.kind values: the seven kinds configsum mutates, then kinds it must leave alone.
pub const KINDS: &[(&str, &str, &str)] = &[
    ("apps", "v1", "Deployment"),
    ("apps", "v1", "StatefulSet"),
    ("apps", "v1", "DaemonSet"),
    ("apps", "v1", "ReplicaSet"),
    ("batch", "v1", "Job"),
    ("argoproj.io", "v1alpha1", "Rollout"),
    ("", "v1", "Pod"),
    ("batch", "v1", "CronJob"),
    ("apps", "v1beta1", "Deployment"),
    ("", "v1", "ConfigMap"),
    ("apps", "v1", "deployment"),
    ("", "", ""),
    ("apps\u{0}", "v1", "Deployment"),
];

pub const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "CONNECT", "create", "", "PATCH"];

pub const NAMESPACES: &[&str] =
    &["shop", "team-a", "", "kube-system", "configsum-system", "Shop", "\u{202E}pohs", "a\u{0301}"];

pub const QUERIES: &[&str] = &[
    "",
    "?timeout=10s",
    "?timeout=1s",
    "?timeout=0s",
    "?timeout=soon",
    "?timeout=18446744073709551615s",
    "?a=b&timeout=30s&timeout=1ms",
];

/// Names for referenced objects: valid, shortened, invalid, empty.
const NAME_POOL: &[&str] = &[
    "a",
    "app-config",
    "x.y",
    "db-credentials",
    "Bad_Name",
    "",
    ".",
    "a..b",
    "-lead",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

#[derive(Clone, Copy, Debug)]
pub enum Names {
    /// `cm-<i>` / `s-<i>`: every reference a new object.
    Distinct,
    /// Only this many distinct objects, referenced over and over.
    Modulo(usize),
    /// From a pool of valid, long and invalid names.
    Pool(usize),
    /// Odd strings, including invalid ones.
    Odd(usize),
    /// 253-character valid names, distinct.
    Long,
}

impl Names {
    fn name(self, i: usize, secret: bool) -> J {
        let prefix = if secret { "s" } else { "cm" };
        match self {
            Names::Distinct => s(format!("{prefix}-{i}")),
            Names::Modulo(k) => s(format!("{prefix}-{}", i % k.max(1))),
            Names::Pool(j) => s(NAME_POOL[(i + j) % NAME_POOL.len()]),
            Names::Odd(j) => odd_valid(i + j),
            Names::Long => {
                let tail = format!("-{i}");
                s(format!("{}{tail}", "n".repeat(253 - tail.len())))
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Keys {
    Few,
    Distinct,
    Odd(usize),
}

impl Keys {
    fn key(self, i: usize) -> J {
        match self {
            Keys::Few => s(format!("k{}", i % 3)),
            Keys::Distinct => s(format!("key-{i}")),
            Keys::Odd(j) => odd_valid(i + j),
        }
    }
}

/// The pod spec: how many of each kind of reference, and their names.
#[derive(Clone, Debug)]
pub struct Spec {
    pub containers: usize,
    pub init_containers: usize,
    pub env: usize,
    pub env_from: usize,
    pub volumes: usize,
    pub sources: usize,
    pub items: usize,
    pub names: Names,
    pub keys: Keys,
    /// 0: no `optional`; 1: true; 2: false; 3: alternating.
    pub optional: u8,
    /// Fields configsum skips: images, ports, resources, probes.
    pub padding: bool,
    /// Variables in each container named as `image-env` entries name them: a digest, a long
    /// value, no value, a name given twice, a `valueFrom`, no name.
    pub plain_env: usize,
}

impl Spec {
    fn optional(&self, i: usize) -> Option<J> {
        match self.optional {
            1 => Some(J::Bool(true)),
            2 => Some(J::Bool(false)),
            3 => Some(J::Bool(i % 2 == 0)),
            _ => None,
        }
    }

    fn with_optional(&self, i: usize, mut members: Vec<(J, J)>) -> J {
        if let Some(optional) = self.optional(i) {
            members.push((s("optional"), optional));
        }
        J::Obj(members)
    }

    fn container(&self, c: usize, counter: &mut usize) -> J {
        let mut env = Vec::with_capacity(self.plain_env + self.env);
        for j in 0..self.plain_env {
            let digest = format!("sha256:{:064x}", j);
            let from = obj([("fieldRef", obj([("fieldPath", s("metadata.name"))]))]);
            env.push(match j % 6 {
                0 => obj([("name", s(format!("DIGEST_{}", j / 6))), ("value", s(digest))]),
                1 => obj([("name", s(format!("V{}", j / 6))), ("value", s("v".repeat(200)))]),
                2 => obj([("name", s("PINNED"))]),
                3 => obj([("name", s("DIGEST_0")), ("value", s("old"))]),
                4 => obj([("name", s(format!("V{}", j / 6 + 1))), ("valueFrom", from)]),
                _ => obj([("value", s("no name"))]),
            });
        }
        for _ in 0..self.env {
            let i = *counter;
            *counter += 1;
            let secret = i % 2 == 1;
            let selector = if secret { "secretKeyRef" } else { "configMapKeyRef" };
            let reference = self.with_optional(
                i,
                vec![(s("name"), self.names.name(i, secret)), (s("key"), self.keys.key(i))],
            );
            env.push(obj([
                ("name", s(format!("E{i}"))),
                ("valueFrom", J::Obj(vec![(s(selector), reference)])),
            ]));
        }
        let mut env_from = Vec::with_capacity(self.env_from);
        for _ in 0..self.env_from {
            let i = *counter;
            *counter += 1;
            let secret = i % 2 == 1;
            let field = if secret { "secretRef" } else { "configMapRef" };
            let reference = self.with_optional(i, vec![(s("name"), self.names.name(i, secret))]);
            env_from.push(J::Obj(vec![(s(field), reference)]));
        }
        let mut members = vec![
            (s("name"), s(format!("c{c}"))),
            // Even containers run a valid reference (tracked when the
            // workload tracks images), odd ones an invalid one with the marker.
            (s("image"), s(if c % 2 == 0 { "registry.example/app:1" } else { IMAGE_WITH_MARKER })),
            (s("env"), J::Arr(env)),
            (s("envFrom"), J::Arr(env_from)),
        ];
        if self.padding {
            members
                .push((s("ports"), J::Arr(vec![obj([("containerPort", J::Lit("8080".into()))])])));
            members.push((
                s("resources"),
                obj([("limits", obj([("cpu", s("1")), ("memory", s("1Gi"))]))]),
            ));
            members.push((
                s("livenessProbe"),
                obj([("httpGet", obj([("path", s("/healthz")), ("port", J::Lit("8080".into()))]))]),
            ));
        }
        J::Obj(members)
    }

    fn items(&self, base: usize) -> J {
        J::Arr(
            (0..self.items)
                .map(|j| obj([("key", self.keys.key(base + j)), ("path", s(format!("p{j}")))]))
                .collect(),
        )
    }

    pub fn build(&self) -> J {
        let mut counter = 0;
        let containers: Vec<J> =
            (0..self.containers).map(|c| self.container(c, &mut counter)).collect();
        let init: Vec<J> =
            (0..self.init_containers).map(|c| self.container(c, &mut counter)).collect();
        let mut volumes = Vec::with_capacity(self.volumes + 1);
        for v in 0..self.volumes {
            let i = counter;
            counter += 1;
            let volume = match v % 3 {
                0 => {
                    let source = self.with_optional(
                        i,
                        vec![(s("name"), self.names.name(i, false)), (s("items"), self.items(i))],
                    );
                    obj([("name", s(format!("v{v}"))), ("configMap", source)])
                }
                1 => {
                    let source = self.with_optional(
                        i,
                        vec![
                            (s("secretName"), self.names.name(i, true)),
                            (s("items"), self.items(i)),
                        ],
                    );
                    obj([("name", s(format!("v{v}"))), ("secret", source)])
                }
                _ => obj([("name", s(format!("v{v}"))), ("emptyDir", J::Obj(Vec::new()))]),
            };
            volumes.push(volume);
        }
        if self.sources > 0 {
            let sources = (0..self.sources)
                .map(|_| {
                    let i = counter;
                    counter += 1;
                    let secret = i % 2 == 1;
                    let field = if secret { "secret" } else { "configMap" };
                    let source = J::Obj(vec![
                        (s("name"), self.names.name(i, secret)),
                        (s("items"), self.items(i)),
                    ]);
                    match i % 5 {
                        4 => obj([("serviceAccountToken", obj([("path", s("token"))]))]),
                        _ => J::Obj(vec![(s(field), source)]),
                    }
                })
                .collect();
            volumes.push(obj([
                ("name", s("projected")),
                ("projected", obj([("sources", J::Arr(sources))])),
            ]));
        }
        obj([
            ("containers", J::Arr(containers)),
            ("initContainers", J::Arr(init)),
            ("volumes", J::Arr(volumes)),
            ("imagePullSecrets", J::Arr(vec![obj([("name", s("registry"))])])),
        ])
    }
}

/// A `track` or `ignore` value: one token pattern repeated.
#[derive(Clone, Debug)]
pub struct TokenList {
    pub token: usize,
    pub count: usize,
}

pub const TOKENS: usize = 18;

impl TokenList {
    fn build(&self) -> J {
        let token = |i: usize| -> Vec<u8> {
            match self.token % TOKENS {
                0 => b"*".to_vec(),
                1 => b"configmap/cm-0".to_vec(),
                2 => format!("secret/s-{}", i % 7).into_bytes(),
                3 => b"bogus/x".to_vec(),
                4 => b"configmap/".to_vec(),
                5 => b"secret/Bad_Name".to_vec(),
                6 => b" ".to_vec(),
                7 => b"configmap/cm-1/extra".to_vec(),
                8 => format!("configmap/{}", "a".repeat(300)).into_bytes(),
                9 => format!("configmap/tracked-{i}").into_bytes(),
                10 => odd_valid_content(i),
                11 => b"*, configmap/cm-2 ,, secret/s-3".to_vec(),
                12 => b"not a token at all".to_vec(),
                // Workloads that roll together: distinct names, one repeated, kinds that
                // cannot be tracked, and names that are not names.
                13 => format!("deployment/db-{i}").into_bytes(),
                14 => b"statefulset/cache, rollout/web, deployment/w".to_vec(),
                15 => format!("job/once-{i}").into_bytes(),
                16 => format!("daemonset/{}", "N".repeat(300)).into_bytes(),
                _ => format!("secret/s-{i}").into_bytes(),
            }
        };
        // At most ~6 MiB of tokens: long tokens repeat fewer times.
        let count = self.count.min((6 << 20) / (token(0).len() + 1));
        let mut out = Vec::new();
        for i in 0..count {
            if i > 0 {
                out.push(b',');
            }
            out.extend(token(i));
        }
        J::RawStr(out)
    }
}

/// The workload's own annotations.
#[derive(Clone, Debug)]
pub struct WorkloadAnnotations {
    pub track: Option<TokenList>,
    pub ignore: Option<TokenList>,
    /// `configsum.dev/enabled`: index into `ENABLED`.
    pub enabled: Option<usize>,
    pub foreign: usize,
    pub foreign_len: usize,
    /// 0: none; 1: a controller owner; 2: a non-controller owner; 3: owner junk.
    pub owner: u8,
    /// `configsum.dev/images` and `image-policy`: indexes into `IMAGES` and `POLICIES`.
    pub images: Option<(usize, usize)>,
    /// `configsum.dev/image-env`: an entry shape (index into `IMAGE_ENV`) repeated `count` times.
    pub image_env: Option<(usize, usize)>,
}

/// `image-env` entries, `{i}` their number: valid ones, a pinned one, and what a tenant might
/// paste there (no `=`, bad names, huge references, separators only, a marker that must never
/// be echoed whole).
pub const IMAGE_ENV: &[&str] = &[
    "c0/DIGEST_{i}=registry.example/ingestor:prod",
    "c0/PINNED=registry.example/tool@sha256:0000000000000000000000000000000000000000000000000000000000000000",
    "c1/V{i}=registry.example/app:{i}",
    "ghost/V=registry.example/app:1",
    "no-equals-{i}",
    "Bad_Name/V=app:1",
    "c0/1BAD=app:1",
    "c0/V=NOT A REFERENCE hunter2-marker",
    ",,, , ,",
    "c0/DIGEST_0=registry.example/ingestor:prod",
];

const ENABLED: &[&str] = &["false", "true", "False", "", "0"];
const IMAGE_WITH_MARKER: &str = "registry.example/app:1 hunter2-marker";
const IMAGES: &[&str] = &["*", "c0", "c0, c1, ghost", "", " , *"];
const POLICIES: &[&str] = &["record", "pin", "Pin", ""];

/// The digest-carrying annotations already on the pod template.
#[derive(Clone, Debug)]
pub struct TemplateAnnotations {
    /// 0: no template metadata; 1: `{}`; 2: `annotations: null`; 3: annotations.
    pub metadata: u8,
    pub owned: usize,
    /// Index into `OWNED_VALUES`.
    pub owned_value: usize,
    pub foreign: usize,
    /// One foreign annotation this long (over 256 KiB trips the size limit).
    pub huge: Option<usize>,
}

const OWNED_VALUES: &[&str] = &[
    "sha256:stale",
    "absent",
    "",
    "hmac-sha256:0000000000000000000000000000000000000000000000000000000000000000",
];

impl TemplateAnnotations {
    fn build(&self, same_as: Option<usize>) -> Vec<(J, J)> {
        let mut members = Vec::new();
        let owned = same_as.unwrap_or(self.owned);
        for i in 0..owned {
            let prefix = if i % 2 == 0 { "configmap" } else { "secret" };
            let short = if i % 2 == 0 { "cm" } else { "s" };
            let value = OWNED_VALUES[(self.owned_value + i) % OWNED_VALUES.len()];
            members.push((s(format!("{prefix}.configsum.dev/{short}-{i}")), s(value)));
        }
        for i in 0..self.foreign {
            members.push((s(format!("example.com/a{i}")), s("v")));
        }
        if let Some(len) = self.huge {
            members.push((s("example.com/huge"), s("h".repeat(len))));
        }
        members
    }
}

/// What the request carries as `oldObject`.
#[derive(Clone, Debug)]
pub enum Old {
    Missing,
    Null,
    /// The same object with this many owned annotations.
    Annotated(usize),
    Junk(usize),
}

/// Where a hostile change lands: a named place or any node.
#[derive(Clone, Debug)]
pub enum Target {
    Anchor(usize),
    Node(Index),
}

/// Places every field the webhook reads; `@` is the pod spec (`spec` of a
/// Pod, `spec/template/spec` otherwise) and `^` the template metadata.
pub const ANCHORS: &[&str] = &[
    "",
    "/apiVersion",
    "/kind",
    "/request",
    "/request/uid",
    "/request/kind",
    "/request/kind/group",
    "/request/kind/version",
    "/request/kind/kind",
    "/request/subResource",
    "/request/name",
    "/request/namespace",
    "/request/operation",
    "/request/dryRun",
    "/request/object",
    "/request/oldObject",
    "/request/oldObject/spec",
    "/request/object/apiVersion",
    "/request/object/kind",
    "/request/object/metadata",
    "/request/object/metadata/name",
    "/request/object/metadata/namespace",
    "/request/object/metadata/annotations",
    "/request/object/metadata/annotations/configsum.dev~1track",
    "/request/object/metadata/annotations/configsum.dev~1ignore",
    "/request/object/metadata/ownerReferences",
    "/request/object/metadata/ownerReferences/0/controller",
    "/request/object/spec",
    "/request/object/spec/template",
    "/request/object/spec/workloadRef",
    "^",
    "^/annotations",
    "@",
    "@/containers",
    "@/containers/0",
    "@/containers/0/env",
    "@/containers/0/env/0",
    "@/containers/0/env/0/valueFrom",
    "@/containers/0/env/0/valueFrom/configMapKeyRef",
    "@/containers/0/env/0/valueFrom/configMapKeyRef/name",
    "@/containers/0/env/0/valueFrom/configMapKeyRef/key",
    "@/containers/0/env/0/valueFrom/configMapKeyRef/optional",
    "@/containers/0/env/1/valueFrom/secretKeyRef",
    "@/containers/0/envFrom",
    "@/containers/0/envFrom/0/configMapRef",
    "@/containers/0/envFrom/0/configMapRef/name",
    "@/containers/0/envFrom/1/secretRef",
    "@/initContainers",
    "@/volumes",
    "@/volumes/0",
    "@/volumes/0/configMap",
    "@/volumes/0/configMap/name",
    "@/volumes/0/configMap/items",
    "@/volumes/0/configMap/items/0/key",
    "@/volumes/1/secret",
    "@/volumes/1/secret/secretName",
    "@/volumes/1/secret/items",
    "@/volumes/3/projected",
    "@/volumes/3/projected/sources",
    "@/volumes/3/projected/sources/0/configMap",
    "@/volumes/3/projected/sources/1/secret/name",
];

/// A hostile change to the tree.
#[derive(Clone, Debug)]
pub enum Action {
    /// Replace the node with a value of another type.
    Replace(usize),
    /// Repeat a member of the object (same key), with its value or junk.
    Duplicate { member: Index, junk: Option<usize> },
    /// Drop a member of the object.
    Remove { member: Index },
    /// Bury the node under `depth` arrays or objects.
    Nest { depth: usize, object: bool },
    /// Replace the node with an odd string.
    OddString(usize),
    /// Give a member of the object an odd key.
    OddKey { member: Index, odd: usize },
    /// Widen an array by `count` junk elements, or an object by `count` members.
    Widen { count: usize, junk: usize },
}

#[derive(Clone, Debug)]
pub struct Hostility {
    pub target: Target,
    pub action: Action,
}

/// Changes to the encoded bytes.
#[derive(Clone, Debug)]
pub enum ByteChange {
    Bom,
    /// Insert one of `BAD_BYTES` at a position.
    Insert {
        at: Index,
        bytes: usize,
    },
    Truncate(Index),
    Overwrite {
        at: Index,
        byte: u8,
    },
}

const BAD_BYTES: &[&[u8]] = &[
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\x00",
    b"\xef\xbb\xbf",
];

/// Whitespace inserted to bring the body to a size around the 8 MiB limit.
#[derive(Clone, Copy, Debug)]
pub enum Pad {
    /// This many bytes under the limit.
    Under(usize),
    Exactly,
    /// This many bytes over the limit.
    Over(usize),
}

#[derive(Clone, Debug)]
pub struct Case {
    pub kind: usize,
    /// The object's own `apiVersion`/`kind` are another kind's.
    pub object_kind: Option<usize>,
    pub operation: usize,
    /// Request namespace (`None`: absent), then the object's.
    pub namespace: Option<usize>,
    pub object_namespace: Option<usize>,
    pub uid: usize,
    pub sub_resource: Option<usize>,
    pub dry_run: Option<bool>,
    pub query: usize,
    pub workload_ref: bool,
    pub spec: Spec,
    pub workload_annotations: WorkloadAnnotations,
    pub template_annotations: TemplateAnnotations,
    pub old: Old,
    pub hostile: Vec<Hostility>,
    pub bytes: Vec<ByteChange>,
    pub pad: Option<Pad>,
    /// Run against a webhook with `--on-lookup-error=deny`.
    pub deny: bool,
}

/// A body and what its construction tells about the expected answer.
pub struct Built {
    pub body: Vec<u8>,
    pub uri: String,
    /// No hostile change and no byte change landed: the body is a well-formed
    /// AdmissionReview v1, so anything but 200 (or 413 when too large) is wrong.
    pub well_formed: bool,
}

impl Case {
    /// What explains a case's cost, for the campaign's summary: kind,
    /// operation, counts and the hostile changes.
    pub fn summary(&self) -> String {
        let (group, version, kind) = KINDS[self.kind % KINDS.len()];
        let operation = OPERATIONS[self.operation % OPERATIONS.len()];
        let spec = &self.spec;
        let wa = &self.workload_annotations;
        let ta = &self.template_annotations;
        let tokens = |list: &Option<TokenList>| {
            list.as_ref().map(|l| format!("{}x token {}", l.count, l.token))
        };
        format!(
            "{group}/{version} {kind} {operation:?}; {} containers ({} init) with {} env and {} envFrom each, \
             {} volumes with {} items, {} projected sources, names {:?}; track {:?}, ignore {:?}, \
             {} foreign annotations of {} bytes; template: {} owned, {} foreign, huge {:?}; \
             old {:?}; hostile {:?}; bytes {:?}; pad {:?}",
            spec.containers,
            spec.init_containers,
            spec.env,
            spec.env_from,
            spec.volumes,
            spec.items,
            spec.sources,
            spec.names,
            tokens(&wa.track),
            tokens(&wa.ignore),
            wa.foreign,
            wa.foreign_len,
            ta.owned,
            ta.foreign,
            ta.huge,
            self.old,
            self.hostile,
            self.bytes,
            self.pad,
        )
    }

    fn uid(&self) -> J {
        match self.uid % 4 {
            0 => s(format!("uid-{}", self.uid)),
            1 => {
                let valid: Vec<usize> = (0..ODD_STRINGS).filter(|i| odd_string(*i).1).collect();
                odd(valid[(self.uid / 4) % valid.len()])
            }
            2 => s("u".repeat(self.uid % (1 << 18))),
            _ => s(format!("\u{202E}{}\u{0301}", self.uid)),
        }
    }

    fn object(&self, old_owned: Option<usize>) -> J {
        let (group, version, kind) = KINDS[self.object_kind.unwrap_or(self.kind) % KINDS.len()];
        let api_version =
            if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
        let wa = &self.workload_annotations;
        let mut annotations = Vec::new();
        if let Some(track) = &wa.track {
            annotations.push((s("configsum.dev/track"), track.build()));
        }
        if let Some(ignore) = &wa.ignore {
            annotations.push((s("configsum.dev/ignore"), ignore.build()));
        }
        if let Some(enabled) = wa.enabled {
            annotations.push((s("configsum.dev/enabled"), s(ENABLED[enabled % ENABLED.len()])));
        }
        if let Some((shape, count)) = wa.image_env {
            let entry = IMAGE_ENV[shape % IMAGE_ENV.len()];
            // At most ~4 MiB: long entries repeat fewer times.
            let count = count.min((4 << 20) / (entry.len() + 8));
            let entries: Vec<String> =
                (0..count).map(|i| entry.replace("{i}", &i.to_string())).collect();
            annotations.push((s("configsum.dev/image-env"), s(entries.join(","))));
        }
        if let Some((images, policy)) = wa.images {
            annotations.push((s("configsum.dev/images"), s(IMAGES[images % IMAGES.len()])));
            annotations
                .push((s("configsum.dev/image-policy"), s(POLICIES[policy % POLICIES.len()])));
        }
        for i in 0..wa.foreign {
            annotations.push((s(format!("team.example/note-{i}")), s("n".repeat(wa.foreign_len))));
        }
        let mut metadata = vec![(s("name"), s("w")), (s("generation"), J::Lit("3".into()))];
        if let Some(ns) = self.object_namespace {
            metadata.push((s("namespace"), s(NAMESPACES[ns % NAMESPACES.len()])));
        }
        match wa.owner {
            1 => metadata.push((
                s("ownerReferences"),
                J::Arr(vec![obj([("kind", s("ReplicaSet")), ("controller", J::Bool(true))])]),
            )),
            2 => metadata.push((
                s("ownerReferences"),
                J::Arr(vec![obj([("kind", s("Other")), ("controller", J::Bool(false))])]),
            )),
            3 => metadata.push((s("ownerReferences"), J::Arr(vec![J::Obj(Vec::new()), J::Null]))),
            _ => {}
        }
        let ta = &self.template_annotations;
        let mut template_annotations = ta.build(old_owned);
        let pod_spec = self.spec.build();
        let spec = if kind == "Pod" {
            // A Pod's digests and its track/ignore share its own annotations.
            template_annotations.extend(annotations);
            metadata.push((s("annotations"), J::Obj(template_annotations)));
            pod_spec
        } else {
            metadata.push((s("annotations"), J::Obj(annotations)));
            let mut template = vec![];
            match ta.metadata {
                0 => {}
                1 => template.push((s("metadata"), J::Obj(Vec::new()))),
                2 => template.push((s("metadata"), obj([("annotations", J::Null)]))),
                _ => template.push((
                    s("metadata"),
                    obj([
                        ("labels", obj([("app", s("w"))])),
                        ("annotations", J::Obj(template_annotations)),
                    ]),
                )),
            }
            template.push((s("spec"), pod_spec));
            let mut spec = vec![
                (s("replicas"), J::Lit("2".into())),
                (s("selector"), obj([("matchLabels", obj([("app", s("w"))]))])),
                (s("template"), J::Obj(template)),
            ];
            if self.workload_ref {
                spec.push((s("workloadRef"), obj([("kind", s("Deployment")), ("name", s("d"))])));
            }
            J::Obj(spec)
        };
        obj([
            ("apiVersion", s(api_version)),
            ("kind", s(kind)),
            ("metadata", J::Obj(metadata)),
            ("spec", spec),
            ("status", obj([("replicas", J::Lit("0".into()))])),
        ])
    }

    fn tree(&self) -> J {
        let (group, version, kind) = KINDS[self.kind % KINDS.len()];
        let mut request = vec![
            (s("uid"), self.uid()),
            (s("kind"), obj([("group", s(group)), ("version", s(version)), ("kind", s(kind))])),
            (
                s("resource"),
                obj([("group", s(group)), ("version", s(version)), ("resource", s("things"))]),
            ),
            (s("name"), s("w")),
            (s("operation"), s(OPERATIONS[self.operation % OPERATIONS.len()])),
            (s("userInfo"), obj([("username", s("system:admin"))])),
        ];
        if let Some(ns) = self.namespace {
            request.push((s("namespace"), s(NAMESPACES[ns % NAMESPACES.len()])));
        }
        if let Some(sub) = self.sub_resource {
            request.push((s("subResource"), s(["", "status", "scale"][sub % 3])));
        }
        if let Some(dry_run) = self.dry_run {
            request.push((s("dryRun"), J::Bool(dry_run)));
        }
        request.push((s("object"), self.object(None)));
        match &self.old {
            Old::Missing => {}
            Old::Null => request.push((s("oldObject"), J::Null)),
            Old::Annotated(owned) => request.push((s("oldObject"), self.object(Some(*owned)))),
            Old::Junk(j) => request.push((s("oldObject"), junk(*j))),
        }
        obj([
            ("apiVersion", s("admission.k8s.io/v1")),
            ("kind", s("AdmissionReview")),
            ("request", J::Obj(request)),
        ])
    }

    /// Applies a hostile change; false if it found nothing to change.
    fn apply(&self, tree: &mut J, hostility: &Hostility) -> bool {
        let templated = !matches!(KINDS[self.kind % KINDS.len()].2, "Pod");
        let node = match &hostility.target {
            Target::Anchor(a) => {
                let anchor = ANCHORS[a % ANCHORS.len()];
                let (pod_spec, template_meta) = if templated {
                    ("/request/object/spec/template/spec", "/request/object/spec/template/metadata")
                } else {
                    ("/request/object/spec", "/request/object/metadata")
                };
                let path = anchor.replacen('@', pod_spec, 1).replacen('^', template_meta, 1);
                tree.at_mut(&path)
            }
            Target::Node(index) => {
                let count = tree.count();
                tree.nth_mut(index.index(count))
            }
        };
        let Some(node) = node else { return false };
        match &hostility.action {
            Action::Replace(j) => *node = junk(*j),
            Action::OddString(o) => *node = odd(*o),
            Action::Nest { depth, object } => {
                let inner = std::mem::replace(node, J::Null);
                *node = J::Nest { depth: *depth, object: *object, inner: Box::new(inner) };
            }
            Action::Duplicate { member, junk: junk_value } => {
                let J::Obj(members) = node else { return false };
                if members.is_empty() {
                    return false;
                }
                let (key, value) = members[member.index(members.len())].clone();
                members.push((key, junk_value.map_or(value, junk)));
            }
            Action::Remove { member } => {
                let J::Obj(members) = node else { return false };
                if members.is_empty() {
                    return false;
                }
                members.remove(member.index(members.len()));
            }
            Action::OddKey { member, odd: o } => {
                let J::Obj(members) = node else { return false };
                if members.is_empty() {
                    return false;
                }
                let i = member.index(members.len());
                members[i].0 = odd(*o);
            }
            Action::Widen { count, junk: j } => {
                // At most 16 MiB of junk: wide, not merely big.
                let count = (*count).min((16 << 20) / (junk(*j).to_bytes().len() + 1));
                match node {
                    J::Arr(items) => items.push(J::Repeat { count, elem: Box::new(junk(*j)) }),
                    J::Obj(members) => members.extend(
                        (0..count.min(200_000)).map(|i| (s(format!("wide-{i}")), junk(*j))),
                    ),
                    _ => return false,
                }
            }
        }
        true
    }

    pub fn build(&self, limit: usize) -> Built {
        let mut tree = self.tree();
        // Junk that is not even JSON (`tru`, a lone surrogate) as oldObject is hostile.
        let mut well_formed = match self.old {
            Old::Junk(j) => {
                serde_json::from_slice::<serde_json::Value>(&junk(j).to_bytes()).is_ok()
            }
            _ => true,
        };
        for hostility in &self.hostile {
            if self.apply(&mut tree, hostility) {
                well_formed = false;
            }
        }
        let mut body = tree.to_bytes();
        for change in &self.bytes {
            well_formed = false;
            match change {
                ByteChange::Bom => body.splice(0..0, [0xef, 0xbb, 0xbf]).for_each(drop),
                ByteChange::Insert { at, bytes } => {
                    let at = at.index(body.len() + 1);
                    let bytes = BAD_BYTES[bytes % BAD_BYTES.len()];
                    body.splice(at..at, bytes.iter().copied()).for_each(drop);
                }
                ByteChange::Truncate(at) => body.truncate(at.index(body.len() + 1)),
                ByteChange::Overwrite { at, byte } => {
                    if !body.is_empty() {
                        let at = at.index(body.len());
                        body[at] = *byte;
                    }
                }
            }
        }
        if let Some(pad) = self.pad {
            let target = match pad {
                Pad::Under(n) => limit.saturating_sub(n),
                Pad::Exactly => limit,
                Pad::Over(n) => limit + n,
            };
            if body.len() < target && !body.is_empty() {
                // Whitespace after the first byte: still the same JSON if it was JSON.
                let fill = target - body.len();
                body.splice(1..1, std::iter::repeat_n(b' ', fill)).for_each(drop);
            }
        }
        // Anything over the limit gets the same 413: sending more only costs time.
        body.truncate(2 * limit);
        let uri = format!("/mutate{}", QUERIES[self.query % QUERIES.len()]);
        Built { body, uri, well_formed }
    }
}

fn names() -> impl Strategy<Value = Names> {
    prop_oneof![
        4 => Just(Names::Distinct),
        2 => (1usize..20).prop_map(Names::Modulo),
        2 => any::<usize>().prop_map(Names::Pool),
        1 => any::<usize>().prop_map(Names::Odd),
        1 => Just(Names::Long),
    ]
}

fn keys() -> impl Strategy<Value = Keys> {
    prop_oneof![
        3 => Just(Keys::Few),
        2 => Just(Keys::Distinct),
        1 => any::<usize>().prop_map(Keys::Odd),
    ]
}

/// Mostly small specs; some with thousands of references in one dimension.
fn spec() -> impl Strategy<Value = Spec> {
    let containers = prop_oneof![1 => Just(0usize), 6 => 1usize..4];
    let small = (containers, 0usize..2, 0usize..5, 0usize..4, 0usize..5, 0usize..5, 0usize..4);
    let medium =
        (1usize..40, 0usize..4, 0usize..60, 0usize..20, 0usize..100, 0usize..100, 0usize..10);
    let large = prop_oneof![
        (1_000usize..5_000).prop_map(|n| (n, 0, 1, 1, 0, 0, 0)),
        (5_000usize..40_000).prop_map(|n| (1, 0, n, 0, 0, 0, 0)),
        (5_000usize..40_000).prop_map(|n| (1, 0, 0, n, 0, 0, 0)),
        (5_000usize..40_000).prop_map(|n| (1, 0, 0, 0, n, 0, 1)),
        (5_000usize..40_000).prop_map(|n| (1, 0, 0, 0, 0, n, 0)),
        (20_000usize..150_000).prop_map(|n| (1, 0, 0, 0, 2, 0, n)),
    ];
    let counts = prop_oneof![85 => small, 12 => medium, 3 => large];
    // Past 256 a container's `env` is not read whole for image-env.
    let plain_env = prop_oneof![3 => Just(0usize), 6 => 1usize..12, 1 => 250usize..270];
    (counts, names(), keys(), 0u8..4, any::<bool>(), plain_env).prop_map(
        |(
            (containers, init_containers, env, env_from, volumes, sources, items),
            names,
            keys,
            optional,
            padding,
            plain_env,
        )| {
            Spec {
                containers,
                init_containers,
                env,
                env_from,
                volumes,
                sources,
                items,
                names,
                keys,
                optional,
                padding,
                plain_env,
            }
        },
    )
}

fn token_list() -> impl Strategy<Value = Option<TokenList>> {
    let count = prop_oneof![8 => 0usize..6, 2 => 6usize..200, 1 => 1_000usize..200_000];
    prop::option::weighted(
        0.4,
        (0..TOKENS, count).prop_map(|(token, count)| TokenList { token, count }),
    )
}

fn workload_annotations() -> impl Strategy<Value = WorkloadAnnotations> {
    let foreign = prop_oneof![8 => 0usize..3, 1 => 100usize..5_000];
    let foreign_len = prop_oneof![8 => 0usize..20, 1 => 1_000usize..100_000];
    (
        token_list(),
        token_list(),
        prop::option::weighted(0.2, 0..ENABLED.len()),
        foreign,
        foreign_len,
        // Mostly no owner: a controller owner means no mutation at all.
        prop_oneof![6 => Just(0u8), 1 => 1u8..4],
        prop::option::weighted(0.3, (0..IMAGES.len(), 0..POLICIES.len())),
        prop::option::weighted(
            0.2,
            (0..IMAGE_ENV.len(), prop_oneof![8 => 1usize..40, 1 => 1_000usize..200_000]),
        ),
    )
        .prop_map(
            |(track, ignore, enabled, foreign, foreign_len, owner, images, image_env)| {
                // Bounded so the body stays within a few MiB.
                let foreign_len = foreign_len.min((4 << 20) / foreign.max(1));
                WorkloadAnnotations {
                    track,
                    ignore,
                    enabled,
                    foreign,
                    foreign_len,
                    owner,
                    images,
                    image_env,
                }
            },
        )
}

fn template_annotations() -> impl Strategy<Value = TemplateAnnotations> {
    let owned = prop_oneof![8 => 0usize..6, 2 => 100usize..300, 1 => 1_000usize..40_000];
    let foreign = prop_oneof![8 => 0usize..3, 1 => 1_000usize..40_000];
    let huge = prop::option::weighted(0.05, 200_000usize..300_000);
    (0u8..4, owned, 0..OWNED_VALUES.len(), foreign, huge).prop_map(
        |(metadata, owned, owned_value, foreign, huge)| TemplateAnnotations {
            metadata,
            owned,
            owned_value,
            foreign,
            huge,
        },
    )
}

fn old() -> impl Strategy<Value = Old> {
    prop_oneof![
        3 => Just(Old::Missing),
        1 => Just(Old::Null),
        3 => (0usize..8).prop_map(Old::Annotated),
        1 => (0..JUNK).prop_map(Old::Junk),
    ]
}

fn hostility() -> impl Strategy<Value = Hostility> {
    let target = prop_oneof![
        3 => (0..ANCHORS.len()).prop_map(Target::Anchor),
        1 => any::<Index>().prop_map(Target::Node),
    ];
    let depth = prop_oneof![
        2 => 1usize..140,
        1 => 120usize..130,
        1 => 1_000usize..100_000,
    ];
    let action = prop_oneof![
        4 => (0..JUNK).prop_map(Action::Replace),
        3 => (any::<Index>(), prop::option::of(0..JUNK))
            .prop_map(|(member, junk)| Action::Duplicate { member, junk }),
        2 => any::<Index>().prop_map(|member| Action::Remove { member }),
        2 => (depth, any::<bool>()).prop_map(|(depth, object)| Action::Nest { depth, object }),
        3 => (0..ODD_STRINGS).prop_map(Action::OddString),
        2 => (any::<Index>(), 0..ODD_STRINGS).prop_map(|(member, odd)| Action::OddKey { member, odd }),
        // Lists of small elements ({}, null, []) are the costliest to parse per byte.
        2 => (
            prop_oneof![1usize..100, 10_000usize..3_000_000],
            prop_oneof![2 => Just(10usize), 1 => Just(0usize), 1 => Just(9usize), 2 => 0..JUNK],
        )
            .prop_map(|(count, junk)| Action::Widen { count, junk }),
    ];
    (target, action).prop_map(|(target, action)| Hostility { target, action })
}

fn byte_change() -> impl Strategy<Value = ByteChange> {
    prop_oneof![
        1 => Just(ByteChange::Bom),
        3 => (any::<Index>(), 0..BAD_BYTES.len()).prop_map(|(at, bytes)| ByteChange::Insert { at, bytes }),
        1 => any::<Index>().prop_map(ByteChange::Truncate),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| ByteChange::Overwrite { at, byte }),
    ]
}

fn pad() -> impl Strategy<Value = Option<Pad>> {
    prop::option::weighted(
        0.02,
        prop_oneof![
            (1usize..(1 << 20)).prop_map(Pad::Under),
            Just(Pad::Exactly),
            (1usize..64).prop_map(Pad::Over),
        ],
    )
}

pub fn case() -> impl Strategy<Value = Case> {
    let request = (
        // Mostly the seven mutated kinds.
        prop_oneof![4 => 0usize..7, 1 => 0..KINDS.len()],
        prop::option::weighted(0.1, 0..KINDS.len()),
        prop_oneof![3 => 0usize..2, 1 => 0..OPERATIONS.len()],
        prop::option::weighted(0.9, prop_oneof![4 => Just(0usize), 1 => 0..NAMESPACES.len()]),
        prop::option::weighted(0.5, 0..NAMESPACES.len()),
        prop_oneof![3 => 0usize..4, 1 => any::<usize>()],
        prop::option::weighted(0.1, 0usize..3),
        prop::option::of(any::<bool>()),
        0..QUERIES.len(),
        prop::bool::weighted(0.1),
    );
    let hostile = prop_oneof![
        6 => Just(Vec::new()),
        4 => prop::collection::vec(hostility(), 1..4),
    ];
    let bytes = prop_oneof![
        9 => Just(Vec::new()),
        1 => prop::collection::vec(byte_change(), 1..3),
    ];
    (
        request,
        spec(),
        workload_annotations(),
        template_annotations(),
        old(),
        hostile,
        bytes,
        pad(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(
                (
                    kind,
                    object_kind,
                    operation,
                    namespace,
                    object_namespace,
                    uid,
                    sub_resource,
                    dry_run,
                    query,
                    workload_ref,
                ),
                spec,
                workload_annotations,
                template_annotations,
                old,
                hostile,
                bytes,
                pad,
                deny,
            )| Case {
                kind,
                object_kind,
                operation,
                namespace,
                object_namespace,
                uid,
                sub_resource,
                dry_run,
                query,
                workload_ref,
                spec,
                workload_annotations,
                template_annotations,
                old,
                hostile,
                bytes,
                pad,
                deny,
            },
        )
}
