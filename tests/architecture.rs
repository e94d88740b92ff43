//! No import cycle under src/: not between files, not between folders.
//!
//! The checker reads every file under src/, builds the module tree from `mod` declarations
//! (from src/lib.rs and src/main.rs) and draws an edge from a file to the file that *defines*
//! each thing its code names. It fails, printing every cycle with the names that make it, on
//!
//! - a cycle between files, and
//! - a cycle between folders: the file edges aggregated to the folder each file lies in
//!   (src/process, src/lookup/file, src/core/inputs/image, …). A folder naming something
//!   defined in its parent folder's mod.rs while that mod.rs names something of the folder is
//!   such a cycle. Each file directly in src/ counts as a folder of its own (see `folder`).
//!
//! What an edge is:
//!
//! - Every path the code writes — `crate::a::b::f()`, `super::X`, `self::y::Z`, a name a `use`
//!   brought in, a name a glob (`use super::*`) brings in — is resolved the way the compiler
//!   does, through `use` and `pub use`, to the module that defines the item. The edge goes to
//!   that module's file. A path that ends at a module (`use crate::registry;`) is no edge by
//!   itself: the paths written through it (`registry::RegistryClient`) are.
//! - A `use` is a binding, not a dependency. A file depends on what it imports where its own
//!   code names it. So a re-export (`pub use child::Thing;` in a mod.rs) is a path, not an
//!   edge: whoever names `parent::Thing` depends on child.rs directly, and a mod.rs that only
//!   declares its children and re-exports them is in no cycle through them. A mod.rs whose own
//!   code names the thing it re-exports does depend on it. The one exception is `use … as _`
//!   (a trait brought in for its methods), which names nothing and is an edge as written.
//! - `mod x;` declares; it is no edge. A `macro_rules!` macro used in a child module by
//!   textual scope is an edge to the file that defines it.
//!
//! The checker reads tokens, not types: a local variable spelled like a name the file imports
//! counts as naming it (a false edge at worst), and names reached through a glob
//! import are every identifier of the file that the glob's module binds. Test code is code:
//! `#[cfg(test)]` modules count. A file under src/ that no `mod` declaration reaches fails the
//! test, so that nothing is skipped unread.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr as _;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// The library's name as `main.rs` writes it (`configsum::…`).
fn lib_name() -> String {
    env!("CARGO_PKG_NAME").replace('-', "_")
}

#[test]
fn src_has_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeMap::new();
    read_tree(root, &root.join("src"), &mut files);
    assert!(files.len() > 50, "read only {} files under src/", files.len());
    let report = check(&files);
    // The checker read the crate, not a sliver of it (it has over 500 edges).
    assert!(
        report.file_edges > 400,
        "only {} file edges: the checker reads too little",
        report.file_edges
    );
    println!("{} file edges", report.file_edges);
    assert!(report.failures.is_empty(), "{}", report.render());
}

fn read_tree(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry of src/").path();
        if path.is_dir() {
            read_tree(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let rel = path.strip_prefix(root).expect("under the manifest directory");
            files.insert(rel.to_string_lossy().replace('\\', "/"), text);
        }
    }
}

/// What the checker found.
#[derive(Debug, Default)]
struct Report {
    /// One entry per cycle, printed in full.
    failures: Vec<String>,
    /// How many file-to-file edges there are: a sanity count.
    file_edges: usize,
    /// (from, to) file edges, each with the first name that makes it.
    edges: BTreeMap<(String, String), String>,
}

impl Report {
    fn render(&self) -> String {
        let mut out = format!("{} import cycle(s) under src/:\n\n", self.failures.len());
        for failure in &self.failures {
            out.push_str(failure);
            out.push('\n');
        }
        out
    }

    fn has_edge(&self, from: &str, to: &str) -> bool {
        self.edges.contains_key(&(from.to_string(), to.to_string()))
    }
}

/// Builds the graph of `files` (path under the crate → text) and reports its cycles; a
fn check(files: &BTreeMap<String, String>) -> Report {
    let mut crate_ = Crate::default();
    let mut errors = Vec::new();
    for root in ["src/lib.rs", "src/main.rs"] {
        if files.contains_key(root) {
            let is_lib = root == "src/lib.rs";
            let id = crate_.load_file(files, root, None, String::new(), &mut errors);
            if is_lib {
                crate_.lib_root = id;
            }
        }
    }
    let reached: HashSet<&str> = crate_.files.iter().map(String::as_str).collect();
    for path in files.keys() {
        if path.starts_with("src/") && !reached.contains(path.as_str()) {
            errors.push(format!("{path}: no `mod` declaration reaches it"));
        }
    }
    let edges = crate_.edges();
    let mut report = Report { file_edges: edges.len(), ..Report::default() };
    for error in errors {
        report.failures.push(format!("unread: {error}\n"));
    }
    let mut folder_edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for ((from, to), name) in &edges {
        let (a, b) = (folder(from), folder(to));
        if a != b {
            folder_edges
                .entry((a.to_string(), b.to_string()))
                .or_insert_with(|| format!("{from} -> {to}: names {name}"));
        }
    }
    for (kind, graph) in [("files", &edges), ("folders", &folder_edges)] {
        for component in cycles(graph) {
            // Between files directly in src/ a folder cycle is the file cycle, told once.
            if kind == "folders" && component.iter().all(|node| node.ends_with(".rs")) {
                continue;
            }
            report.failures.push(describe(kind, &component, graph));
        }
    }
    report.edges = edges;
    report
}

/// The folder a file counts in: the one it lies in, except that each file directly in src/
/// is a node of its own. src/ is the crate's root, not a module's folder: main.rs is another
/// crate, lib.rs only declares, and config.rs or digest_key.rs are top-level modules on the
/// floor of src/process, not parts of one module.
fn folder(file: &str) -> &str {
    match file.rsplit_once('/') {
        Some(("src", _)) | None => file,
        Some((dir, _)) => dir,
    }
}

/// A cycle (strongly connected component of more than one node): its members, one shortest
/// loop through it, and every edge inside it with the name that makes it.
fn describe(
    kind: &str,
    component: &BTreeSet<String>,
    graph: &BTreeMap<(String, String), String>,
) -> String {
    let mut out = format!(
        "cycle between {kind}: {}\n",
        component.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let start = component.iter().next().expect("a component has members");
    if let Some(path) = shortest_loop(start, component, graph) {
        let _ = writeln!(out, "  for example: {}", path.join(" -> "));
    }
    for ((from, to), name) in graph {
        if component.contains(from) && component.contains(to) {
            let _ = writeln!(out, "  {from} -> {to}  ({name})");
        }
    }
    out
}

fn shortest_loop(
    start: &str,
    component: &BTreeSet<String>,
    graph: &BTreeMap<(String, String), String>,
) -> Option<Vec<String>> {
    let mut before: HashMap<&str, &str> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for (from, to) in graph.keys() {
            if from != node || !component.contains(to) {
                continue;
            }
            if to == start {
                let mut path = vec![start.to_string()];
                let mut at = node;
                while at != start {
                    path.push(at.to_string());
                    at = before[at];
                }
                path.push(start.to_string());
                path.reverse();
                return Some(path);
            }
            if !before.contains_key(to.as_str()) {
                before.insert(to, node);
                queue.push_back(to);
            }
        }
    }
    None
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles(graph: &BTreeMap<(String, String), String>) -> Vec<BTreeSet<String>> {
    let mut nodes: BTreeSet<&str> = BTreeSet::new();
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    for (from, to) in graph.keys() {
        nodes.insert(from);
        nodes.insert(to);
        next.entry(from).or_default().push(to);
    }
    struct Tarjan<'a> {
        next: HashMap<&'a str, Vec<&'a str>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: HashSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, node: &'a str) {
            let i = self.index.len();
            self.index.insert(node, i);
            self.low.insert(node, i);
            self.stack.push(node);
            self.on_stack.insert(node);
            for to in self.next.get(node).cloned().unwrap_or_default() {
                if !self.index.contains_key(to) {
                    self.visit(to);
                    let low = self.low[node].min(self.low[to]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(to) {
                    let low = self.low[node].min(self.index[to]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.insert(member.to_string());
                    if member == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        next,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: HashSet::new(),
        found: Vec::new(),
    };
    for node in nodes {
        if !tarjan.index.contains_key(node) {
            tarjan.visit(node);
        }
    }
    tarjan.found.sort();
    tarjan.found
}

/// A token, with groups kept as trees.
#[derive(Debug, Clone)]
enum Tok {
    Ident(String),
    /// The character, and whether the next punctuation is joined to it (`::`).
    Punct(char, bool),
    Literal,
    Group(Delimiter, Vec<Tok>),
}

fn tokens(stream: TokenStream) -> Vec<Tok> {
    stream
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Ident(ident) => Tok::Ident(ident.to_string()),
            TokenTree::Punct(punct) => {
                Tok::Punct(punct.as_char(), punct.spacing() == Spacing::Joint)
            }
            TokenTree::Literal(_) => Tok::Literal,
            TokenTree::Group(group) => Tok::Group(group.delimiter(), tokens(group.stream())),
        })
        .collect()
}

fn is_ident(tok: Option<&Tok>, word: &str) -> bool {
    matches!(tok, Some(Tok::Ident(w)) if w == word)
}

fn is_punct(tok: Option<&Tok>, c: char) -> bool {
    matches!(tok, Some(Tok::Punct(p, _)) if *p == c)
}

/// `::` at `toks[i]`.
fn is_path_sep(toks: &[Tok], i: usize) -> bool {
    matches!(toks.get(i), Some(Tok::Punct(':', true))) && is_punct(toks.get(i + 1), ':')
}

/// A name a `use` binds in its module: `name` stands for `path`.
#[derive(Debug, Clone)]
struct Binding {
    /// `_` for `use Trait as _`.
    name: String,
    path: Vec<String>,
}

#[derive(Debug, Default)]
struct Module {
    parent: Option<usize>,
    /// The root module of this module's crate.
    root: usize,
    /// Index into `Crate::files`.
    file: usize,
    /// `a::b` below the crate root, for messages.
    name: String,
    children: HashMap<String, usize>,
    /// Items defined here: functions, types, traits, constants, statics, macros.
    items: HashSet<String>,
    macros: HashSet<String>,
    bindings: Vec<Binding>,
    globs: Vec<Vec<String>>,
    body: Vec<Tok>,
}

/// Where a path leads.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    Module(usize),
    /// An item defined in this module, and its name there.
    Item(usize, String),
}

#[derive(Debug, Default)]
struct Crate {
    files: Vec<String>,
    modules: Vec<Module>,
    lib_root: usize,
}

impl Crate {
    /// Reads the module in file `path` and, through its `mod` declarations, the files below.
    fn load_file(
        &mut self,
        files: &BTreeMap<String, String>,
        path: &str,
        parent: Option<usize>,
        name: String,
        errors: &mut Vec<String>,
    ) -> usize {
        let text = &files[path];
        let body = match TokenStream::from_str(text) {
            Ok(stream) => tokens(stream),
            Err(e) => {
                errors.push(format!("{path}: cannot be read as Rust tokens: {e}"));
                Vec::new()
            }
        };
        self.files.push(path.to_string());
        let file = self.files.len() - 1;
        let id = self.new_module(parent, file, name);
        // Children of src/a/mod.rs and src/lib.rs live in src/a/; of src/a/b.rs, in src/a/b/.
        let dir = match path.rsplit_once('/') {
            Some((dir, "mod.rs" | "lib.rs" | "main.rs")) => dir.to_string(),
            _ => path.trim_end_matches(".rs").to_string(),
        };
        self.scan(files, id, &body, &dir, errors);
        self.modules[id].body = body;
        id
    }

    fn new_module(&mut self, parent: Option<usize>, file: usize, name: String) -> usize {
        let id = self.modules.len();
        let root = parent.map_or(id, |p| self.modules[p].root);
        self.modules.push(Module { parent, root, file, name, ..Module::default() });
        id
    }

    /// Records the items, child modules and `use` bindings of module `id` whose tokens are
    /// `toks` (items only at the top, `use` at any depth).
    fn scan(
        &mut self,
        files: &BTreeMap<String, String>,
        id: usize,
        toks: &[Tok],
        dir: &str,
        errors: &mut Vec<String>,
    ) {
        let mut i = 0;
        while i < toks.len() {
            if let Some(end) = use_item(toks, i) {
                let mut bindings = Vec::new();
                let mut globs = Vec::new();
                parse_use_tree(&toks[i + 1..end], &[], &mut bindings, &mut globs);
                self.modules[id].bindings.extend(bindings);
                self.modules[id].globs.extend(globs);
                i = end + 1;
                continue;
            }
            if let Some(Tok::Ident(word)) = toks.get(i) {
                if let Some(Tok::Ident(name)) = toks.get(i + 1) {
                    match word.as_str() {
                        "mod" => {
                            let child_name = qualified(&self.modules[id].name, name);
                            let child = if let Some(Tok::Group(Delimiter::Brace, inner)) =
                                toks.get(i + 2)
                            {
                                let file = self.modules[id].file;
                                let child = self.new_module(Some(id), file, child_name);
                                self.scan(files, child, inner, &format!("{dir}/{name}"), errors);
                                self.modules[child].body = inner.clone();
                                Some(child)
                            } else {
                                let flat = format!("{dir}/{name}.rs");
                                let nested = format!("{dir}/{name}/mod.rs");
                                match (files.contains_key(&flat), files.contains_key(&nested)) {
                                    (true, false) => Some(self.load_file(
                                        files,
                                        &flat,
                                        Some(id),
                                        child_name,
                                        errors,
                                    )),
                                    (false, true) => Some(self.load_file(
                                        files,
                                        &nested,
                                        Some(id),
                                        child_name,
                                        errors,
                                    )),
                                    _ => {
                                        errors.push(format!(
                                            "mod {child_name}: neither or both of {flat}, {nested}"
                                        ));
                                        None
                                    }
                                }
                            };
                            let inline = child
                                .is_some_and(|c| self.modules[c].file == self.modules[id].file);
                            if let Some(child) = child {
                                self.modules[id].children.insert(name.clone(), child);
                            }
                            // Past the name, and past an inline module's body: its `use`s are its own.
                            i += if inline { 3 } else { 2 };
                            continue;
                        }
                        "fn" | "struct" | "enum" | "trait" | "type" | "union" => {
                            self.modules[id].items.insert(name.clone());
                        }
                        "const" | "static"
                            if !matches!(
                                name.as_str(),
                                "fn" | "unsafe" | "async" | "extern" | "mut"
                            ) =>
                        {
                            self.modules[id].items.insert(name.clone());
                        }
                        "mut" if i > 0 && is_ident(toks.get(i - 1), "static") => {
                            self.modules[id].items.insert(name.clone());
                        }
                        _ => {}
                    }
                }
                if word == "macro_rules" && is_punct(toks.get(i + 1), '!') {
                    if let Some(Tok::Ident(name)) = toks.get(i + 2) {
                        self.modules[id].items.insert(name.clone());
                        self.modules[id].macros.insert(name.clone());
                    }
                }
            }
            if let Some(Tok::Group(_, inner)) = toks.get(i) {
                self.scan_nested_uses(id, inner);
            }
            i += 1;
        }
    }

    /// `use` inside function bodies and blocks binds names for this module too (wider than
    /// the compiler's scope: more edges, never fewer).
    fn scan_nested_uses(&mut self, id: usize, toks: &[Tok]) {
        let mut i = 0;
        while i < toks.len() {
            if let Some(end) = use_item(toks, i) {
                let mut bindings = Vec::new();
                let mut globs = Vec::new();
                parse_use_tree(&toks[i + 1..end], &[], &mut bindings, &mut globs);
                self.modules[id].bindings.extend(bindings);
                self.modules[id].globs.extend(globs);
                i = end + 1;
                continue;
            }
            if let Some(Tok::Group(_, inner)) = toks.get(i) {
                self.scan_nested_uses(id, inner);
            }
            i += 1;
        }
    }

    /// The file-to-file edges, each with the first name written that makes it.
    fn edges(&self) -> BTreeMap<(String, String), String> {
        let mut edges = BTreeMap::new();
        for (id, module) in self.modules.iter().enumerate() {
            let mut names = Vec::new();
            collect_paths(&module.body, &mut names);
            for binding in &module.bindings {
                if binding.name == "_" {
                    names.push((binding.path.clone(), false));
                }
            }
            for (path, is_macro) in names {
                let target = self.resolve_path(id, &path, 0).or_else(|| {
                    // A `macro_rules!` macro is in scope in the modules declared after it.
                    let [name] = path.as_slice() else { return None };
                    if !is_macro {
                        return None;
                    }
                    let mut at = module.parent;
                    while let Some(m) = at {
                        if self.modules[m].macros.contains(name) {
                            return Some(Target::Item(m, name.clone()));
                        }
                        at = self.modules[m].parent;
                    }
                    None
                });
                if let Some(Target::Item(defining, item)) = target {
                    let from = &self.files[module.file];
                    let to = &self.files[self.modules[defining].file];
                    if from != to {
                        let written = path.join("::");
                        let defined = qualified(&self.modules[defining].name, &item);
                        let name = if written.ends_with(&defined) {
                            written
                        } else {
                            format!("{written} = crate::{defined}")
                        };
                        edges.entry((from.clone(), to.clone())).or_insert(name);
                    }
                }
            }
        }
        edges
    }

    fn resolve_path(&self, from: usize, segs: &[String], depth: usize) -> Option<Target> {
        if depth > 32 || segs.is_empty() {
            return None;
        }
        let (mut at, rest) = match segs[0].as_str() {
            "crate" => (self.modules[from].root, &segs[1..]),
            "self" => (from, &segs[1..]),
            "super" => {
                let mut at = from;
                let mut n = 0;
                while segs.get(n).is_some_and(|s| s == "super") {
                    at = self.modules[at].parent?;
                    n += 1;
                }
                (at, &segs[n..])
            }
            name if name == lib_name() && self.modules[from].root != self.lib_root => {
                (self.lib_root, &segs[1..])
            }
            _ => (from, segs),
        };
        for seg in rest {
            match self.resolve_in(at, seg, depth + 1)? {
                Target::Module(m) => at = m,
                // What follows an item is its associated item or variant.
                Target::Item(m, name) => return Some(Target::Item(m, name)),
            }
        }
        Some(Target::Module(at))
    }

    /// `name` in the namespace of module `at`: its children, its items, its imports.
    fn resolve_in(&self, at: usize, name: &str, depth: usize) -> Option<Target> {
        if depth > 32 {
            return None;
        }
        let module = &self.modules[at];
        if let Some(&child) = module.children.get(name) {
            return Some(Target::Module(child));
        }
        if module.items.contains(name) {
            return Some(Target::Item(at, name.to_string()));
        }
        for binding in module.bindings.iter().filter(|b| b.name == name) {
            // A binding's own name at its path's start is the crate or module it names, never
            // itself (`use serde;`).
            if binding.path.len() == 1 && binding.path[0] == name {
                continue;
            }
            if let Some(target) = self.resolve_path(at, &binding.path, depth + 1) {
                return Some(target);
            }
        }
        for glob in &module.globs {
            if let Some(Target::Module(m)) = self.resolve_path(at, glob, depth + 1) {
                if m != at {
                    if let Some(target) = self.resolve_in(m, name, depth + 1) {
                        return Some(target);
                    }
                }
            }
        }
        None
    }
}

fn qualified(module: &str, name: &str) -> String {
    if module.is_empty() { name.to_string() } else { format!("{module}::{name}") }
}

/// If `toks[i]` starts a `use` item, the index of its `;`.
fn use_item(toks: &[Tok], i: usize) -> Option<usize> {
    if !is_ident(toks.get(i), "use") {
        return None;
    }
    // `impl Trait + use<'a>` is no import.
    if is_punct(toks.get(i + 1), '<') {
        return None;
    }
    (i + 1..toks.len()).find(|&j| is_punct(toks.get(j), ';'))
}

/// The bindings and globs of a use tree (the tokens between `use` and `;`).
fn parse_use_tree(
    toks: &[Tok],
    prefix: &[String],
    bindings: &mut Vec<Binding>,
    globs: &mut Vec<Vec<String>>,
) {
    let mut path = prefix.to_vec();
    let mut i = 0;
    // `use ::std::…` is another crate.
    if is_path_sep(toks, 0) {
        return;
    }
    loop {
        match toks.get(i) {
            Some(Tok::Ident(seg)) => {
                path.push(seg.clone());
                i += 1;
                if is_path_sep(toks, i) {
                    i += 2;
                    continue;
                }
                let mut name = seg.clone();
                if is_ident(toks.get(i), "as") {
                    match toks.get(i + 1) {
                        Some(Tok::Ident(alias)) => name = alias.clone(),
                        _ => return,
                    }
                }
                if name == "self" {
                    // `use a::b::{self}` binds `b`.
                    path.pop();
                    match path.last() {
                        Some(last) => name = last.clone(),
                        None => return,
                    }
                }
                bindings.push(Binding { name, path });
                return;
            }
            Some(Tok::Punct('*', _)) => {
                globs.push(path);
                return;
            }
            Some(Tok::Group(Delimiter::Brace, inner)) => {
                for part in inner.split(|t| is_punct(Some(t), ',')) {
                    if !part.is_empty() {
                        parse_use_tree(part, &path, bindings, globs);
                    }
                }
                return;
            }
            _ => return,
        }
    }
}

/// Every path the code writes, outside `use` items and inline modules (whose paths are
/// their own module's), with whether it names a macro (`name!`).
fn collect_paths(toks: &[Tok], out: &mut Vec<(Vec<String>, bool)>) {
    let mut i = 0;
    while i < toks.len() {
        if let Some(end) = use_item(toks, i) {
            i = end + 1;
            continue;
        }
        match &toks[i] {
            Tok::Ident(word) if word == "mod" => {
                // An inline module's tokens are its own module's; a declaration is no path.
                i += if matches!(toks.get(i + 2), Some(Tok::Group(Delimiter::Brace, _))) {
                    3
                } else {
                    2
                };
            }
            Tok::Ident(first) => {
                let continues = i >= 2 && is_path_sep(toks, i - 2);
                let member_or_var = i >= 1
                    && (is_punct(toks.get(i - 1), '.')
                        || is_punct(toks.get(i - 1), '$')
                        || is_punct(toks.get(i - 1), '\''));
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while is_path_sep(toks, j) {
                    match toks.get(j + 2) {
                        Some(Tok::Ident(seg)) => {
                            path.push(seg.clone());
                            j += 3;
                        }
                        _ => break,
                    }
                }
                if !continues && !member_or_var {
                    let is_macro = is_punct(toks.get(j), '!');
                    out.push((path, is_macro));
                }
                i = j;
            }
            Tok::Group(_, inner) => {
                collect_paths(inner, out);
                i += 1;
            }
            _ => i += 1,
        }
    }
}

/// Tests of the checker itself, on small trees.
mod checker {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
    }

    #[test]
    fn finds_a_cycle_between_two_files_and_names_it() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod a; pub mod b;"),
            ("src/a.rs", "use crate::b::B; pub struct A(B);"),
            ("src/b.rs", "pub struct B; pub fn f(_: crate::a::A) {}"),
        ]));
        assert_eq!(report.failures.len(), 1, "{}", report.render());
        let text = &report.failures[0];
        assert!(text.starts_with("cycle between files: src/a.rs, src/b.rs"), "{text}");
        assert!(text.contains("src/b.rs -> src/a.rs  (crate::a::A)"), "{text}");
        assert!(text.contains("src/a.rs -> src/b.rs  (B = crate::b::B)"), "{text}");
    }

    #[test]
    fn an_acyclic_tree_passes() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod a; pub mod b; pub mod c;"),
            ("src/a.rs", "use crate::b::B; pub struct A(B, crate::c::C);"),
            ("src/b.rs", "use super::c; pub struct B(c::C);"),
            (
                "src/c.rs",
                "pub struct C; #[cfg(test)] mod tests { use super::*; fn t() -> C { C } }",
            ),
        ]));
        assert!(report.failures.is_empty(), "{}", report.render());
        assert!(report.has_edge("src/a.rs", "src/b.rs"));
        assert!(report.has_edge("src/a.rs", "src/c.rs"));
        assert!(report.has_edge("src/b.rs", "src/c.rs"));
        assert_eq!(report.file_edges, 3);
    }

    #[test]
    fn re_exports_lead_to_the_defining_file_and_make_no_cycle() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod a; pub mod x;"),
            (
                "src/x/mod.rs",
                "mod y; pub use y::Y; pub use self::y::{other as renamed}; pub fn helper() {}",
            ),
            ("src/x/y.rs", "use super::helper; pub struct Y; pub fn other() { helper() }"),
            ("src/a.rs", "use crate::x::{Y, renamed}; pub fn f(_: Y) { renamed() }"),
        ]));
        assert!(report.failures.is_empty(), "{}", report.render());
        assert!(report.has_edge("src/a.rs", "src/x/y.rs"));
        assert!(!report.has_edge("src/a.rs", "src/x/mod.rs"));
        assert!(!report.has_edge("src/x/mod.rs", "src/x/y.rs"));
        assert!(report.has_edge("src/x/y.rs", "src/x/mod.rs"));
    }

    #[test]
    fn a_mod_rs_that_uses_what_it_re_exports_depends_on_it() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod x;"),
            ("src/x/mod.rs", "mod y; pub use y::Y; pub struct Helper; pub fn f(_: Y) {}"),
            ("src/x/y.rs", "pub struct Y(super::Helper);"),
        ]));
        assert_eq!(report.failures.len(), 1, "{}", report.render());
        assert!(report.failures[0].contains("src/x/mod.rs -> src/x/y.rs"), "{}", report.render());
    }

    #[test]
    fn finds_a_cycle_between_a_folder_and_its_parent() {
        // No file cycle: p/mod.rs names q/leaf.rs, q/leaf.rs names p/other.rs.
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod p;"),
            ("src/p/mod.rs", "pub mod other; pub mod q; pub fn f() { q::leaf::g() }"),
            ("src/p/other.rs", "pub struct O;"),
            ("src/p/q/mod.rs", "pub mod leaf;"),
            ("src/p/q/leaf.rs", "use crate::p::other::O; pub fn g() -> O { O }"),
        ]));
        assert_eq!(report.failures.len(), 1, "{}", report.render());
        let text = &report.failures[0];
        assert!(text.starts_with("cycle between folders: src/p, src/p/q"), "{text}");
        assert!(
            text.contains("src/p/q -> src/p  (src/p/q/leaf.rs -> src/p/other.rs: names O"),
            "{text}"
        );
    }

    #[test]
    fn files_directly_in_src_are_nodes_of_their_own() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod config; pub mod command; pub mod p;"),
            ("src/config.rs", "pub struct Args;"),
            ("src/command.rs", "pub fn run() { crate::p::y::go() }"),
            ("src/p/mod.rs", "pub mod x; pub mod y;"),
            ("src/p/x.rs", "pub fn f(_: crate::config::Args) {}"),
            ("src/p/y.rs", "pub fn go() {}"),
        ]));
        assert!(report.failures.is_empty(), "{}", report.render());
    }

    #[test]
    fn an_inline_module_s_imports_are_its_own() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod x;"),
            ("src/x/mod.rs", "mod y; pub fn written() {} pub fn g() { y::f() }"),
            (
                "src/x/y.rs",
                "pub fn f() { let written = 1; } #[cfg(test)] mod tests { use super::*; fn t() { f() } }",
            ),
        ]));
        assert!(report.failures.is_empty(), "{}", report.render());
        assert!(!report.has_edge("src/x/y.rs", "src/x/mod.rs"));
    }

    #[test]
    fn a_glob_import_of_the_parent_reaches_what_it_imports() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod a; pub mod b;"),
            ("src/a/mod.rs", "#[cfg(test)] mod tests; use crate::b::c::C; pub fn f(_: C) {}"),
            ("src/a/tests.rs", "use super::*; fn t(_: C) { f(C) }"),
            ("src/b/mod.rs", "pub mod c;"),
            ("src/b/c.rs", "pub struct C; pub fn g() { crate::a::f(C) }"),
        ]));
        assert!(report.has_edge("src/a/tests.rs", "src/b/c.rs"));
        assert!(report.has_edge("src/a/tests.rs", "src/a/mod.rs"));
        assert_eq!(
            report.failures.len(),
            2,
            "files a/mod.rs <-> b/c.rs, folders src/a <-> src/b: {}",
            report.render()
        );
    }

    #[test]
    fn macros_and_trait_imports_are_edges() {
        let report = check(&tree(&[
            ("src/lib.rs", "macro_rules! m { () => {} } pub mod a; pub mod t;"),
            ("src/a.rs", "use crate::t::Tr as _; fn f() { m!(); }"),
            ("src/t.rs", "pub trait Tr {}"),
        ]));
        assert!(report.has_edge("src/a.rs", "src/lib.rs"));
        assert!(report.has_edge("src/a.rs", "src/t.rs"));
    }

    #[test]
    fn a_module_path_is_no_edge_but_what_is_named_through_it_is() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod a; pub mod x;"),
            ("src/x/mod.rs", "pub mod y; pub use y::Y; pub struct X;"),
            ("src/x/y.rs", "pub struct Y;"),
            ("src/a.rs", "use crate::x; fn f(_: x::Y) {} fn g(_: crate::x::y::Y) {}"),
        ]));
        assert!(report.has_edge("src/a.rs", "src/x/y.rs"));
        assert!(!report.has_edge("src/a.rs", "src/x/mod.rs"));
    }

    #[test]
    fn a_file_no_module_declares_fails() {
        let report =
            check(&tree(&[("src/lib.rs", "pub mod a;"), ("src/a.rs", ""), ("src/stray.rs", "")]));
        assert_eq!(report.failures.len(), 1, "{}", report.render());
        assert!(report.failures[0].contains("src/stray.rs"), "{}", report.render());
    }

    #[test]
    fn main_names_the_library_by_its_crate_name() {
        let report = check(&tree(&[
            ("src/lib.rs", "pub mod a;"),
            ("src/a.rs", "pub fn run() {}"),
            ("src/main.rs", &format!("fn main() {{ {}::a::run() }}", lib_name())),
        ]));
        assert!(report.has_edge("src/main.rs", "src/a.rs"));
    }
}
