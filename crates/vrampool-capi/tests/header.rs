//! `include/vrampool.h` is what cbindgen makes of this crate now.

use std::path::{Path, PathBuf};

/// The checked-in header.
fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/vrampool.h")
}

/// The header cbindgen generates from the crate's source and `cbindgen.toml`.
fn generated_header() -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml reads");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut bytes = Vec::new();
    bindings.write(&mut bytes);
    String::from_utf8(bytes).expect("the header is UTF-8")
}

#[test]
fn the_checked_in_header_is_current() {
    let generated = generated_header();
    let path = header_path();
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("include/vrampool.h is writable");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in.lines().zip(generated.lines()).position(|(a, b)| a != b);
        panic!(
            "include/vrampool.h is stale (first difference at line {}; it has {} lines, the generated one {}). \
             Refresh it with: UPDATE_HEADER=1 cargo test -p vrampool-capi --test header",
            line.map_or_else(|| "end".to_string(), |l| (l + 1).to_string()),
            checked_in.lines().count(),
            generated.lines().count()
        );
    }
}

#[test]
fn the_header_declares_every_exported_function_and_status() {
    let header = generated_header();
    for name in [
        "void *vrampool_torch_alloc(size_t size, int device, void *stream);",
        "void vrampool_torch_free(void *ptr, size_t size, int device, void *stream);",
        "const char *vrampool_last_error(void);",
        "int vrampool_last_error_code(void);",
        "vrampool_pool *vrampool_pool_create(const char *config);",
        "vrampool_pool *vrampool_pool_create_on_device(const char *config, int device);",
        "void vrampool_pool_destroy(vrampool_pool *pool);",
        "int vrampool_pool_alloc(vrampool_pool *pool,",
        "int vrampool_pool_free(vrampool_pool *pool, uint64_t addr);",
        "int vrampool_pool_trim(vrampool_pool *pool, uint64_t *out_bytes);",
        "char *vrampool_pool_stats_json(vrampool_pool *pool);",
        "char *vrampool_stats_json(int device);",
        "void vrampool_string_free(char *text);",
        "int vrampool_device_pool_exists(int device);",
        "int vrampool_device_trim(int device, uint64_t *out_bytes);",
        "int vrampool_device_trim_all(uint64_t *out_bytes);",
        "typedef struct vrampool_pool vrampool_pool;",
        "VRAMPOOL_STATUS_OK = 0,",
        "VRAMPOOL_STATUS_BAD_ARGUMENT = -1,",
        "VRAMPOOL_STATUS_INTERNAL = -9,",
    ] {
        assert!(header.contains(name), "the header lacks `{name}`:\n{header}");
    }
}

/// The config keys the header lists: the words between `keys:` and the sentence after them, values in
/// brackets left out.
fn header_keys(header: &str) -> Vec<String> {
    let flat: String = header.lines().map(|l| l.trim_start_matches(" *").trim()).collect::<Vec<_>>().join(" ");
    let start = flat.find("keys:").expect("the header lists the config keys") + "keys:".len();
    let end = start + flat[start..].find(". An unknown key").expect("the list ends with a sentence");
    let mut list = flat[start..end].to_string();
    while let (Some(open), Some(close)) = (list.find('('), list.find(')')) {
        list.replace_range(open..=close, "");
    }
    list.split(',').map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).collect()
}

/// The keys of the config-string reference in `vrampool`'s `pool_spec` module (its table's first column).
fn documented_keys() -> Vec<String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vrampool/src/pool_spec.rs");
    let text = std::fs::read_to_string(source).expect("pool_spec.rs reads");
    let mut keys = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("//! | `")) {
        let column = line.trim_start_matches("//! | ").split(" | ").next().unwrap_or_default();
        keys.extend(column.split(", ").map(|k| k.trim_matches('`').to_string()));
    }
    keys
}

/// The header names every config key there is, and only those, in the order of the key table
/// ([`vrampool::CONFIG_KEYS`]): each one it lists is accepted by the parser (whatever it says of the value),
/// and the reference table of the config strings lists the same keys.
#[test]
fn the_header_lists_every_config_key() {
    let header = std::fs::read_to_string(header_path()).expect("include/vrampool.h reads");
    let mut listed = header_keys(&header);
    let table: Vec<&str> = vrampool::CONFIG_KEYS.iter().map(|key| key.name).collect();
    assert_eq!(listed, table, "the header's keys (cbindgen.toml) against the key table");
    for key in &listed {
        if let Err(err) = vrampool::PoolSpec::parse(&format!("{key}=?")) {
            assert!(!err.to_string().contains("unknown key"), "the header lists `{key}`: {err}");
        }
    }
    let mut documented = documented_keys();
    listed.sort();
    documented.sort();
    assert_eq!(listed, documented, "the header's keys against pool_spec.rs's table");
}

/// The limits the header states in words are the library's own.
#[test]
fn the_limits_the_header_states_are_the_librarys() {
    let header = generated_header();
    let words: Vec<&str> =
        header.lines().flat_map(|line| line.trim_start().trim_start_matches('*').split_whitespace()).collect();
    let flat = words.join(" ");
    for statement in [
        format!("take the device ordinals 0 to {}", vrampool_c::MAX_DEVICES - 1),
        format!(
            "at most {} segments and {} blocks, with `segments_left_out` and `blocks_left_out`",
            vrampool_c::MAX_REPORTED_SEGMENTS,
            vrampool_c::MAX_REPORTED_BLOCKS
        ),
        format!(
            "at most {} segments and {} blocks listed",
            vrampool_c::MAX_REPORTED_SEGMENTS,
            vrampool_c::MAX_REPORTED_BLOCKS
        ),
    ] {
        assert!(flat.contains(&statement), "the header does not say `{statement}`");
    }
}

/// The names of the functions the header declares, in its order: the word before the `(` of each
/// declaration that starts a line.
fn header_functions(header: &str) -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = Vec::new();
    for line in
        header.lines().filter(|line| !line.starts_with([' ', '*', '/', '#', '}']) && !line.starts_with("typedef"))
    {
        let Some((before, _)) = line.split_once('(') else { continue };
        let start = before.rfind(|c: char| !is_word(c)).map_or(0, |at| at + 1);
        if before[start..].starts_with("vrampool_") {
            names.push(before[start..].to_owned());
        }
    }
    names
}

/// The README's list of the C functions names every function the header declares, so that a function added
/// to the library is listed there too.
#[test]
fn the_readme_lists_every_function_of_the_header() {
    let header = std::fs::read_to_string(header_path()).expect("include/vrampool.h reads");
    let functions = header_functions(&header);
    assert!(functions.len() >= 27, "{functions:?}");
    assert!(functions.contains(&"vrampool_string_free".to_owned()), "{functions:?}");
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(readme_path).expect("README.md reads");
    let missing: Vec<&String> = functions
        .iter()
        .filter(|name| !readme.contains(&format!("`{name}`")) && !readme.contains(&format!("`{name}(")))
        .collect();
    assert!(missing.is_empty(), "README.md's list of the C functions lacks {missing:?}");
}
