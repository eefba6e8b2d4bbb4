// SPDX-License-Identifier: GPL-2.0

//! A small scanner that lifts definitions verbatim out of kernel C sources:
//! structs and unions (with the aggregates they use), the enum declaring a
//! given enumerator, `#define` lines and static function definitions. It
//! relies on the kernel's regular formatting (one definition starting at a
//! line, braces balanced) rather than on a C parser; whatever it lifts is
//! then compiled, so a wrong cut shows up as a compile error, not as a
//! silently wrong value.

/// `text` with its C comments blanked out (newlines kept, so that line
/// structure survives).
pub(crate) fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            out.push(' ');
            i = end;
        } else if b[i..].starts_with(b"//") {
            i = text[i..].find('\n').map_or(b.len(), |e| i + e);
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Positions where `word` occurs as a whole identifier.
fn word_positions<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let b = text.as_bytes();
        (i == 0 || !is_ident(b[i - 1])) && b.get(i + word.len()).is_none_or(|&c| !is_ident(c))
    })
}

/// Index just past the brace that closes the one at `open`.
fn block_end(text: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces");
}

/// The definition `struct NAME { ... } attrs;` (or `union`), if `text` has it.
pub(crate) fn find_aggregate(text: &str, kind: &str, name: &str) -> Option<String> {
    let head = format!("{kind} {name}");
    for start in word_positions(text, &head) {
        let rest = &text[start + head.len()..];
        let body = rest.len() - rest.trim_start().len();
        if rest.trim_start().starts_with('{') {
            let open = start + head.len() + body;
            let end = block_end(text, open);
            let semi = end + text[end..].find(';').expect("definition ends with ;");
            return Some(text[start..=semi].to_string());
        }
    }
    None
}

/// The `struct X` / `union X` types a definition uses (by name).
fn used_aggregates(def: &str) -> Vec<(String, String)> {
    let mut used = Vec::new();
    let body = &def[def.find('{').unwrap()..];
    for kind in ["struct", "union"] {
        for i in word_positions(body, kind) {
            let rest = body[i + kind.len()..].trim_start();
            let name: String = rest
                .bytes()
                .take_while(|&c| is_ident(c))
                .map(char::from)
                .collect();
            if !name.is_empty() {
                used.push((kind.to_string(), name));
            }
        }
    }
    used
}

/// Appends the definition of `kind name` from `text` to `out`, after the
/// definitions it depends on; `done` avoids repeats.
pub(crate) fn emit_aggregate(
    text: &str,
    kind: &str,
    name: &str,
    out: &mut String,
    done: &mut Vec<String>,
) {
    let key = format!("{kind} {name}");
    if done.contains(&key) {
        return;
    }
    let def = find_aggregate(text, kind, name).unwrap_or_else(|| panic!("{key} not found"));
    for (k, n) in used_aggregates(&def) {
        if find_aggregate(text, &k, &n).is_some() {
            emit_aggregate(text, &k, &n, out, done);
        }
    }
    done.push(key);
    out.push_str(&def);
    out.push_str("\n\n");
}

/// The `enum ... { ... };` that declares the enumerator `ident`.
pub(crate) fn find_enum_declaring(text: &str, ident: &str) -> String {
    for start in word_positions(text, "enum") {
        let rest = &text[start + 4..];
        let Some(open_rel) = rest.find(['{', ';', '(']) else {
            continue;
        };
        if !rest[open_rel..].starts_with('{') {
            continue;
        }
        let open = start + 4 + open_rel;
        let end = block_end(text, open);
        let block = &text[start..end];
        if enumerators(block).iter().any(|e| e == ident) {
            let semi = end + text[end..].find(';').expect("enum ends with ;");
            return text[start..=semi].to_string();
        }
    }
    panic!("no enum declares {ident}");
}

/// The enumerator names of an enum definition.
pub(crate) fn enumerators(block: &str) -> Vec<String> {
    let body = &block[block.find('{').unwrap() + 1..block.rfind('}').unwrap()];
    let mut names = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in body.chars().chain(std::iter::once(',')) {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                let name: String = item
                    .trim_start()
                    .chars()
                    .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    names
}

/// The `#define NAME ...` line (with continuations).
pub(crate) fn find_define(text: &str, name: &str) -> String {
    for line_start in text.match_indices("#define").map(|(i, _)| i) {
        let rest = text[line_start + 7..].trim_start_matches([' ', '\t']);
        if rest.starts_with(name)
            && rest
                .as_bytes()
                .get(name.len())
                .is_some_and(|&c| !is_ident(c))
        {
            let mut end = line_start;
            loop {
                let nl = end + text[end..].find('\n').unwrap_or(text.len() - end);
                if text[..nl].trim_end().ends_with('\\') {
                    end = nl + 1;
                } else {
                    return text[line_start..nl].to_string();
                }
            }
        }
    }
    panic!("no #define {name}");
}

/// The definition of the static function `name`.
pub(crate) fn find_function(text: &str, name: &str) -> String {
    for at in word_positions(text, name) {
        if !text[at + name.len()..].starts_with('(') {
            continue;
        }
        let line = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let start = if text[line..].starts_with("static") {
            line
        } else {
            // `static inline TYPE` on the line before the name.
            let prev = text[..line.saturating_sub(1)]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            if !text[prev..].starts_with("static") {
                continue;
            }
            prev
        };
        let open = at + text[at..].find(['{', ';']).unwrap();
        if !text[open..].starts_with('{') {
            continue;
        }
        return text[start..block_end(text, open)].to_string();
    }
    panic!("no definition of {name}");
}
