//! docs/json.md's shape tables are generated from `schemas/*.schema.json` (which
//! tests/schemas.rs keeps equal to the document types): this fails when the page's
//! generated part is not what the schema files give, and says how to regenerate, so a
//! field cannot change in a type without the page following it.
//!
//! The generated part lies between [`BEGIN`] and [`END`]; everything else on the page (the
//! contract, the examples) is written by hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

const REGENERATE: &str = "AVFS_UPDATE_DOCS=1 cargo test --test json_doc";
const BEGIN: &str = "<!-- begin generated shapes: tests/json_doc.rs renders this part from schemas/*.schema.json; do not edit it by hand -->";
const END: &str = "<!-- end generated shapes -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The schema files, by file stem (`checkpoint-save`), in name order.
fn schema_files(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".schema.json"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        out.insert(stem.to_string(), v);
    }
    out
}

/// A GitHub-style anchor for a heading's text.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Where the definitions of the schema files are rendered: a definition that is the
/// same in every file that has it is rendered once; one that differs between files is
/// rendered once per file, its heading naming the file.
struct Defs {
    /// (file stem, definition name) -> heading text.
    headings: BTreeMap<(String, String), String>,
}

impl Defs {
    fn new(files: &BTreeMap<String, Value>) -> Defs {
        let mut by_name: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
        for (stem, schema) in files {
            if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
                for (name, def) in defs {
                    by_name
                        .entry(name.clone())
                        .or_default()
                        .push((stem.clone(), def.clone()));
                }
            }
        }
        // Names that differ only in case (`Change`, the envelope's `change`) would get
        // one anchor: those are named with their first file too.
        let mut lower: BTreeMap<String, usize> = BTreeMap::new();
        for name in by_name.keys() {
            *lower.entry(name.to_lowercase()).or_default() += 1;
        }
        let mut headings = BTreeMap::new();
        for (name, uses) in by_name {
            let same = uses.iter().all(|(_, d)| *d == uses[0].1);
            let clash = lower[&name.to_lowercase()] > 1;
            let first = uses[0].0.clone();
            for (stem, _) in uses {
                let heading = match (same, clash) {
                    (true, false) => name.clone(),
                    (true, true) => format!("{name} ({first})"),
                    (false, _) => format!("{name} ({stem})"),
                };
                headings.insert((stem, name.clone()), heading);
            }
        }
        Defs { headings }
    }

    fn link(&self, stem: &str, reference: &str) -> String {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        match self.headings.get(&(stem.to_string(), name.to_string())) {
            Some(h) => format!("[{name}](#{})", anchor(h)),
            None => format!("`{reference}`"),
        }
    }
}

/// One table cell: no line breaks, no unescaped bars.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The type of a schema, in words: JSON types, `array of T`, links to definitions,
/// constants and enumerations.
fn type_of(stem: &str, s: &Value, defs: &Defs) -> String {
    let Some(o) = s.as_object() else {
        return match s {
            Value::Bool(true) => "any".into(),
            _ => "nothing".into(),
        };
    };
    if let Some(r) = o.get("$ref").and_then(Value::as_str) {
        return defs.link(stem, r);
    }
    if let Some(c) = o.get("const") {
        return format!("`{c}`");
    }
    if let Some(e) = o.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = e.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = o.get(key).and_then(Value::as_array) {
            let mut words: Vec<String> = Vec::new();
            for a in alts {
                let w = type_of(stem, a, defs);
                if !words.contains(&w) {
                    words.push(w);
                }
            }
            return words.join(" or ");
        }
    }
    let types: Vec<&str> = match o.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return "any".into(),
    };
    let words: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "array" => match o.get("items") {
                Some(items) => format!("array of {}", type_of(stem, items, defs)),
                None => "array".into(),
            },
            "object" => match o.get("additionalProperties") {
                Some(a @ Value::Object(_)) if !o.contains_key("properties") => {
                    format!("object of {}", type_of(stem, a, defs))
                }
                _ => "object".into(),
            },
            "integer" | "number" => match o.get("format").and_then(Value::as_str) {
                Some(f) => format!("{t} ({f})"),
                None => t.to_string(),
            },
            other => other.to_string(),
        })
        .collect();
    words.join(" or ")
}

/// The rows of an object schema's fields; an object field with fields of its own is
/// followed by theirs, named `field.sub`.
fn rows(stem: &str, s: &Value, prefix: &str, defs: &Defs, out: &mut Vec<String>) {
    let Some(props) = s.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = props.keys().collect();
    names.sort();
    for name in names {
        let p = &props[name];
        let description = p.get("description").and_then(Value::as_str).unwrap_or("");
        out.push(format!(
            "| `{prefix}{name}` | {} | {} | {} |",
            cell(&type_of(stem, p, defs)),
            if required.contains(&name.as_str()) {
                "yes"
            } else {
                "no"
            },
            cell(description)
        ));
        if p.get("properties").is_some() {
            rows(stem, p, &format!("{prefix}{name}."), defs, out);
        }
    }
}

fn table(stem: &str, s: &Value, defs: &Defs, out: &mut Vec<String>) {
    if let Some(d) = s.get("description").and_then(Value::as_str) {
        out.push(String::new());
        out.push(d.to_string());
    }
    let kind = type_of(stem, s, defs);
    if s.get("properties").is_none() {
        out.push(String::new());
        out.push(format!("Type: {kind}."));
        return;
    }
    out.push(String::new());
    out.push("| field | type | always present | meaning |".into());
    out.push("|---|---|---|---|".into());
    rows(stem, s, "", defs, out);
}

/// The generated part of docs/json.md for these schema files.
fn render(files: &BTreeMap<String, Value>) -> String {
    let defs = Defs::new(files);
    let mut out = vec![
        BEGIN.to_string(),
        String::new(),
        "\"always present\" is the schema's `required`: a field marked no may be absent. \
         A type `T or null` is present and may be `null`."
            .to_string(),
    ];
    for (stem, schema) in files {
        out.push(String::new());
        out.push(format!("### `{stem}.schema.json`"));
        table(stem, schema, &defs, &mut out);
    }
    out.push(String::new());
    out.push("### Definitions".to_string());
    out.push(String::new());
    out.push("The objects the documents above refer to.".to_string());
    let mut done = Vec::new();
    for ((stem, name), heading) in &defs.headings {
        if done.contains(heading) {
            continue;
        }
        done.push(heading.clone());
        out.push(String::new());
        out.push(format!("#### {heading}"));
        table(stem, &files[stem]["$defs"][name], &defs, &mut out);
    }
    out.push(String::new());
    out.push(END.to_string());
    out.join("\n")
}

/// The page with its generated part replaced by `generated`.
fn with_generated(page: &str, generated: &str) -> String {
    let start = page
        .find(BEGIN)
        .unwrap_or_else(|| panic!("docs/json.md has no line {BEGIN}"));
    let end = page[start..]
        .find(END)
        .map(|i| start + i + END.len())
        .unwrap_or_else(|| panic!("docs/json.md has no line {END}"));
    format!("{}{generated}{}", &page[..start], &page[end..])
}

#[test]
fn json_md_shapes_are_the_schema_files() {
    let files = schema_files(&root().join("schemas"));
    assert!(files.len() >= 18, "schemas/ holds {} files", files.len());
    let page_path = root().join("docs/json.md");
    let page = std::fs::read_to_string(&page_path).unwrap();
    let want = with_generated(&page, &render(&files));
    if want == page {
        return;
    }
    if std::env::var_os("AVFS_UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&page_path, want).unwrap();
        return;
    }
    let first = page
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .map(|i| i + 1)
        .unwrap_or_else(|| page.lines().count().min(want.lines().count()) + 1);
    panic!(
        "docs/json.md's generated shapes differ from schemas/*.schema.json (first at line \
         {first}); regenerate the page with `{REGENERATE}` and commit it"
    );
}

/// Every schema file is named by the hand-written part of the page (the command that
/// prints it links to its shape), so a new document type cannot go unexplained.
#[test]
fn json_md_names_every_schema_file() {
    let files = schema_files(&root().join("schemas"));
    let page = std::fs::read_to_string(root().join("docs/json.md")).unwrap();
    let start = page.find(BEGIN).expect("the generated part");
    let end = page.find(END).expect("the generated part's end");
    let by_hand = format!("{}{}", &page[..start], &page[end..]);
    for stem in files.keys() {
        let link = format!("(#{})", anchor(&format!("`{stem}.schema.json`")));
        assert!(
            by_hand.contains(&link),
            "docs/json.md: no command section links to the shape of {stem} ({link})"
        );
    }
}

/// The renderer itself: a field of a definition, a `$ref`, `T or null`, an enumeration
/// and a nested object's fields come out as the table says.
#[test]
fn renderer_writes_what_a_schema_says() {
    let schema: Value = serde_json::json!({
        "description": "`x --json`.",
        "type": "object",
        "properties": {
            "a": {"description": "An a.\nTwo lines | one bar.", "type": ["string", "null"]},
            "b": {"$ref": "#/$defs/Bee"},
            "c": {"type": "array", "items": {"enum": ["p", "q"]}},
            "d": {"type": "object", "properties": {"e": {"type": "integer", "format": "uint64"}},
                  "required": ["e"]}
        },
        "required": ["a", "b"],
        "$defs": {"Bee": {"type": "object", "properties": {"f": {"const": "g"}}}}
    });
    let mut files = BTreeMap::new();
    files.insert("x".to_string(), schema);
    let text = render(&files);
    for line in [
        "### `x.schema.json`",
        "| `a` | string or null | yes | An a. Two lines \\| one bar. |",
        "| `b` | [Bee](#bee) | yes |  |",
        "| `c` | array of one of `\"p\"`, `\"q\"` | no |  |",
        "| `d.e` | integer (uint64) | yes |  |",
        "#### Bee",
        "| `f` | `\"g\"` | no |  |",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}
