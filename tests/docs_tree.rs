//! docs/layout.md and docs/extending.md stay true to the tree: every file or folder they
//! name exists, every function they name with `()` is defined under src/, and layout.md
//! names every source file, test target, benchmark and example.
//!
//! layout.md is a tree: a line that starts in the first column opens a folder
//! (`src/controller/state/`); the names on the lines that follow are relative to it
//! (`queue.rs`, `api/`, `model/work.rs`), and a test target is named by its stem.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const EXTENSIONS: &[&str] = &[".rs", ".md", ".sh", ".py", ".go", ".yaml", ".yml", ".toml", ".json"];
/// Words that look like file names and are not: a Python package.
const NOT_PATHS: &[&str] = &["ruamel.yaml"];
/// The repository's top-level folders: a name starting with one is relative to the root.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "docs/",
    "scripts/",
    "charts/",
    "manifests/",
    "tools/",
    "plugins/",
    "certs/",
    "benches/",
    "examples/",
    ".ci/",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file and folder under `dir`, relative to the root, with `/` after folders.
fn tree(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root().join(dir)) else { return };
    for entry in entries.flatten() {
        let path = dir.join(entry.file_name());
        let name = path.to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(format!("{name}/"));
            tree(&path, out);
        } else {
            out.push(name);
        }
    }
}

fn repository() -> Vec<String> {
    let mut out: Vec<String> = ROOTS.iter().map(|r| (*r).to_owned()).collect();
    for top in ROOTS {
        tree(Path::new(top.trim_end_matches('/')), &mut out);
    }
    for file in ["Makefile", "README.md", "Cargo.toml"] {
        out.push(file.to_owned());
    }
    out
}

/// The words of `text` that name a file or a folder.
fn path_words(text: &str) -> Vec<String> {
    let separators = |c: char| c.is_whitespace() || ",;:()`'\"[]|".contains(c);
    text.split(separators)
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| !w.is_empty() && !w.contains('<') && !w.contains('*') && !w.contains('{'))
        .filter(|w| !w.starts_with("http") && !w.starts_with("--") && !w.starts_with('$'))
        .filter(|w| {
            let named_file = EXTENSIONS.iter().any(|e| w.ends_with(e) && w.len() > e.len());
            let folder = w.ends_with('/') && w.len() > 1 && !w.contains("//");
            named_file || folder
        })
        .filter(|w| !w.starts_with("target/") && !w.starts_with('/') && !w.starts_with("~"))
        .filter(|w| !NOT_PATHS.contains(w))
        .map(str::to_owned)
        .collect()
}

/// The files of `repository` that `word`, named under `folder`, stands for.
fn resolve<'a>(repository: &'a [String], folder: &str, word: &str) -> Vec<&'a String> {
    if ROOTS.iter().any(|r| word.starts_with(r)) {
        return repository.iter().filter(|p| p.as_str() == word).collect();
    }
    let suffix = format!("/{word}");
    repository.iter().filter(|p| p.starts_with(folder) && p.ends_with(&suffix)).collect()
}

/// layout.md's code block, as (folder, line) pairs.
fn layout_lines() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("docs/layout.md")).expect("docs/layout.md");
    let block = text.split("```").nth(1).expect("layout.md's tree is in a code block");
    let mut folder = String::new();
    let mut lines = Vec::new();
    for line in block.lines() {
        if let Some(first) = line.split_whitespace().next().filter(|_| !line.starts_with(' ')) {
            // `src/main.rs` names a file of src/; `src/core/` opens a folder.
            folder = match first.rfind('/') {
                Some(at) => first[..=at].to_owned(),
                None => String::new(),
            };
        }
        lines.push((folder.clone(), line.to_owned()));
    }
    lines
}

#[test]
fn every_path_layout_md_names_exists_and_it_names_every_source_file_and_test() {
    let repository = repository();
    let mut missing = Vec::new();
    let mut covered: BTreeSet<&String> = BTreeSet::new();
    let mut words: BTreeSet<String> = BTreeSet::new();
    for (folder, line) in layout_lines() {
        for word in path_words(&line) {
            // Under src/core/, `inputs/` opens a subfolder that later names are under too.
            let found = resolve(&repository, &folder, &word);
            if found.is_empty() {
                missing.push(format!("{word} (under {folder})"));
            }
            covered.extend(found);
        }
        let separators = |c: char| c.is_whitespace() || ",;:()".contains(c);
        words.extend(line.split(separators).map(|w| format!("{folder}{w}")));
    }
    assert!(missing.is_empty(), "docs/layout.md names what does not exist: {missing:#?}");

    let mut unnamed = Vec::new();
    for path in &repository {
        let source = path.starts_with("src/") && path.ends_with(".rs");
        let top_level =
            |dir: &str| path.starts_with(dir) && path[dir.len()..].matches('/').count() == 0;
        let target = (top_level("tests/") || top_level("benches/") || top_level("examples/"))
            && path.ends_with(".rs");
        // A folder's mod.rs is the folder: naming `api/` names it.
        let folder_named = path
            .strip_suffix("mod.rs")
            .is_some_and(|folder| covered.iter().any(|c| c.as_str() == folder));
        if source && !covered.contains(path) && !folder_named {
            unnamed.push(path.clone());
        }
        // Test targets are named by their stem (`e2e_serve`), the others as files.
        if target && !covered.contains(path) {
            let stem = path.trim_end_matches(".rs");
            if !words.contains(stem) {
                unnamed.push(path.clone());
            }
        }
    }
    assert!(unnamed.is_empty(), "docs/layout.md does not name: {unnamed:#?}");
}

#[test]
fn every_path_and_function_extending_md_names_exists() {
    let repository = repository();
    let text = std::fs::read_to_string(root().join("docs/extending.md")).expect("extending.md");
    let spans: Vec<&str> = text.split('`').skip(1).step_by(2).collect();
    let mut missing = Vec::new();
    for span in &spans {
        for word in path_words(span) {
            if resolve(&repository, "", &word).is_empty() {
                missing.push(word);
            }
        }
    }
    let sources: String = repository
        .iter()
        .filter(|p| p.starts_with("src/") && p.ends_with(".rs"))
        .filter_map(|p| std::fs::read_to_string(root().join(p)).ok())
        .collect();
    for span in spans.iter().filter(|s| s.ends_with("()")) {
        let name = span.trim_end_matches("()").rsplit("::").next().unwrap_or_default();
        let name = name.rsplit('.').next().unwrap_or_default();
        if !name.is_empty() && !sources.contains(&format!("fn {name}")) {
            missing.push(format!("{span} (no `fn {name}` under src/)"));
        }
    }
    assert!(missing.is_empty(), "docs/extending.md names what does not exist: {missing:#?}");
}

#[test]
fn path_words_are_what_names_a_file_or_a_folder() {
    let words =
        path_words("mod.rs (the router), `state/queue.rs`; api/ and --flag=x.rs, <kind>.rs");
    assert_eq!(words, ["mod.rs", "state/queue.rs", "api/"]);
    let repository =
        vec!["src/a/".to_owned(), "src/a/mod.rs".to_owned(), "src/b/mod.rs".to_owned()];
    assert_eq!(resolve(&repository, "src/a/", "mod.rs"), [&repository[1]]);
    assert_eq!(resolve(&repository, "", "src/b/mod.rs"), [&repository[2]]);
    assert!(resolve(&repository, "src/a/", "nothing.rs").is_empty());
}
