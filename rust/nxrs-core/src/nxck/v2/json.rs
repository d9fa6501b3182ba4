//! The JSON header, parsed strictly: what `docs/FORMAT.md` accepts and nothing more, with the
//! memory it costs bounded by the header's length, not by the numbers in it.
//!
//! serde_json alone is more lenient than the specification in what it skips: values of keys a
//! struct does not know are only checked for syntax (bytes inside their strings are not checked
//! to be UTF-8; their nesting is not limited), and keys are not checked for repetition. So the
//! header is parsed in three steps, each of which bounds the next:
//! 1. the whole header must be UTF-8 (`str::from_utf8`);
//! 2. one pass over the text ([`check_structure`]), which skips string contents, limits
//!    nesting to [`MAX_DEPTH`] and rejects an object that has a key twice (compared after
//!    unescaping, as any JSON parser sees them);
//! 3. serde_json into the typed header, where every list and map is read by
//!    [`crate::bounded`], which refuses more items than allowed as soon as it sees them.

use super::HeaderJson;
use crate::error::{clip, Error, Result};

/// Deepest nesting of arrays and objects a header may have (the header object itself is
/// level 1; nxrs writes 4). Deeper input is refused before serde_json sees it, so neither its
/// recursion nor its skipping of unknown values can be driven by nesting.
pub const MAX_DEPTH: usize = 64;

/// Parses a header's bytes (see the module documentation).
pub(super) fn parse(json: &[u8]) -> Result<HeaderJson> {
    let text = std::str::from_utf8(json).map_err(|e| {
        Error::Header(format!(
            "the JSON header is not UTF-8 (invalid bytes at header offset {})",
            e.valid_up_to()
        ))
    })?;
    check_structure(text)?;
    serde_json::from_str(text)
        .map_err(|e| Error::Header(format!("JSON header: {}", clip(&format_args!("{e}")))))
}

/// An open array or object during [`check_structure`].
enum Open {
    Array,
    Object {
        /// Whether the next string is a key (after `{` or `,`).
        key_next: bool,
        keys: Vec<Key>,
    },
}

/// A key of an object, by where its text is: a range of the header (no escapes), or of the
/// buffer of unescaped keys. 12 bytes, whatever the key's length.
#[derive(Clone, Copy)]
struct Key {
    unescaped: bool,
    start: u32,
    end: u32,
}

/// Nesting depth and unique keys, in one pass over the text that skips string contents. It
/// only looks at brackets, commas and strings; anything else (including malformed JSON) is
/// left to serde_json.
fn check_structure(text: &str) -> Result<()> {
    let bytes = text.as_bytes();
    let mut open: Vec<Open> = Vec::new();
    let mut unescaped_keys = String::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let (end, escaped) = string_end(bytes, i);
                if let Some(Open::Object { key_next, keys }) = open.last_mut() {
                    if *key_next {
                        *key_next = false;
                        let raw = &text[i..end.min(bytes.len())];
                        keys.push(key(raw, escaped, &mut unescaped_keys, i)?);
                    }
                }
                i = end;
                continue;
            }
            b'[' | b'{' => {
                if open.len() == MAX_DEPTH {
                    return Err(Error::Header(format!(
                        "the JSON header nests deeper than {MAX_DEPTH} levels (at header offset {i})"
                    )));
                }
                open.push(if bytes[i] == b'[' {
                    Open::Array
                } else {
                    Open::Object {
                        key_next: true,
                        keys: Vec::new(),
                    }
                });
            }
            b',' => {
                if let Some(Open::Object { key_next, .. }) = open.last_mut() {
                    *key_next = true;
                }
            }
            b']' | b'}' => {
                if let Some(Open::Object { keys, .. }) = open.pop() {
                    check_unique(text, &unescaped_keys, keys)?;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The index just past the string that starts with the quote at `start` (the text's end if
/// it is unterminated), and whether it has escapes.
fn string_end(bytes: &[u8], start: usize) -> (usize, bool) {
    let mut escaped = false;
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return (i + 1, escaped),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
    (bytes.len(), escaped)
}

/// The key whose quoted text is `raw`, unescaped into `buffer` when it has escapes.
fn key(raw: &str, escaped: bool, buffer: &mut String, at: usize) -> Result<Key> {
    // The header is at most 64 MiB (checked before), so offsets fit in u32.
    let offset = |n: usize| n as u32;
    if !escaped {
        return Ok(Key {
            unescaped: false,
            start: offset(at + 1),
            end: offset(at + raw.len().saturating_sub(1)),
        });
    }
    // A lone surrogate escape (`"\ud800"`) is no Unicode text; such keys cannot be compared as
    // text and are refused.
    let value: String = serde_json::from_str(raw).map_err(|e| {
        Error::Header(format!(
            "JSON header: the key {} at header offset {at} is not Unicode text: {e}",
            clip(raw)
        ))
    })?;
    let start = buffer.len();
    buffer.push_str(&value);
    Ok(Key {
        unescaped: true,
        start: offset(start),
        end: offset(buffer.len()),
    })
}

fn check_unique(text: &str, unescaped: &str, mut keys: Vec<Key>) -> Result<()> {
    let resolve = |k: &Key| {
        let source = if k.unescaped { unescaped } else { text };
        &source[k.start as usize..k.end as usize]
    };
    keys.sort_unstable_by(|a, b| resolve(a).cmp(resolve(b)));
    match keys.windows(2).find(|w| resolve(&w[0]) == resolve(&w[1])) {
        None => Ok(()),
        Some(w) => Err(Error::Header(format!(
            "the JSON header has the key {} twice in one object",
            clip(resolve(&w[0]))
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        match check_structure(text) {
            Err(Error::Header(m)) => m,
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn nesting_is_limited_outside_strings_only() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_structure(&format!("{{\"a\":{}}}", deep(MAX_DEPTH - 1))).is_ok());
        assert!(refusal(&format!("{{\"a\":{}}}", deep(MAX_DEPTH))).contains("deeper than 64"));
        // Brackets and quotes inside strings do not count.
        let in_string = format!("{{\"a\":\"{}\\\"{}\"}}", "[".repeat(100), "{".repeat(100));
        assert!(check_structure(&in_string).is_ok());
        // A million levels cost a million bytes of scanning, nothing more.
        assert!(refusal(&deep(1_000_000)).contains("deeper"));
    }

    #[test]
    fn keys_must_be_unique_in_each_object_after_unescaping() {
        assert!(check_structure(r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#).is_ok());
        assert!(refusal(r#"{"a":1,"b":2,"a":3}"#).contains("\"a\" twice"));
        assert!(refusal(r#"{"x":{"k":[1,"k"],"k":2}}"#).contains("\"k\" twice"));
        assert!(refusal(r#"{"a":1,"\u0061":2}"#).contains("\"a\" twice"));
        assert!(refusal(r#"{"é":1,"\u00e9":2}"#).contains("twice"));
        // String values equal to a key are not keys.
        assert!(check_structure(r#"{"a":"a","b":["a","a"]}"#).is_ok());
        assert!(refusal(r#"{"\ud800":1}"#).contains("is not Unicode text"));
    }

    #[test]
    fn the_header_must_be_utf8_as_a_whole() {
        // serde_json alone skips the bytes inside the strings of keys it does not know.
        let err = parse(b"{\"x\xff\":1}").unwrap_err();
        assert!(
            matches!(&err, Error::Header(m) if m.contains("not UTF-8")),
            "{err}"
        );
    }
}
