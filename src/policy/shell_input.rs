//! What a shell text must be before brush-parser reads it: bounds it is checked against
//! (length, nesting) and the final newline it is given. These exist because the parser
//! itself has no bound on them: it recurses on nesting, and its tokenizer can loop
//! allocating forever at the end of the input (below).

use super::grammar::ParseError;

/// Brackets a line may open before the parser is not even tried.
const MAX_BRACKETS: usize = 64;
/// Longest line parsed.
const MAX_LINE: usize = 256 * 1024;

/// Rejects what would make the parser recurse without bound, before it runs.
pub fn precheck(line: &str) -> Result<(), ParseError> {
    if line.len() > MAX_LINE {
        return Err(ParseError(format!(
            "the line is longer than {} KiB",
            MAX_LINE / 1024
        )));
    }
    let (mut depth, mut max) = (0usize, 0usize);
    for ch in line.chars() {
        match ch {
            '(' | '{' | '[' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let ticks = line.chars().filter(|c| *c == '`').count();
    // Compound commands nest through keywords, which the parser recurses into too.
    let compounds = line
        .split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
        .filter(|w| {
            matches!(
                *w,
                "if" | "while" | "until" | "for" | "case" | "select" | "function"
            )
        })
        .count();
    if max > MAX_BRACKETS || ticks > MAX_BRACKETS || compounds > 4 * MAX_BRACKETS {
        return Err(ParseError(format!(
            "nested more than {MAX_BRACKETS} levels deep"
        )));
    }
    Ok(())
}

/// The text brush-parser is given: `text` with a newline after it.
///
/// Why: brush-parser 0.4.0's tokenizer (`next_token_until`, at the end of the input)
/// loops forever, pushing a token onto a `Vec` each turn, when the input ends while a
/// here-document tag is pending and no newline followed it and that tag is empty once
/// unquoted: `cat <<'' ` (note the space), `$(<<  ` (blanks inside `$(...)` become the
/// tag), `<<E$[\t\t`. Its `remove_here_end_tag` matches the empty tag against the empty
/// token, hands it to `delimit_current_token`, which files it under the pending tag
/// without changing state, and the loop goes round again. Allocation failure aborts, so
/// `guarded` cannot catch it. After a final newline outside quotes no tag is pending
/// without its line having started: the newline either starts the here-document bodies
/// (which then end, or are unterminated: an error) or is a missing tag (an error). A
/// newline inside a quote, a backquote or an extended glob ends in an "unterminated"
/// error first. A trailing newline changes nothing else a shell line means.
///
/// One case is left: after an odd run of backslashes the newline would be a line
/// continuation, not a newline, and the loop could still be reached (`cat <<'' \`).
/// Such a text has a backslash that escapes nothing; it is refused, as brush-parser
/// refuses it ("unterminated escape sequence") everywhere but in a comment.
pub fn terminated(text: &str) -> Result<String, ParseError> {
    let trailing = text.bytes().rev().take_while(|b| *b == b'\\').count();
    if trailing % 2 == 1 {
        return Err(ParseError(
            "the line ends with a backslash that escapes nothing".into(),
        ));
    }
    let mut input = String::with_capacity(text.len() + 1);
    input.push_str(text);
    input.push('\n');
    Ok(input)
}

/// A parser message about `input` (a `terminated` text) as the user's text would have it:
/// the position just past the added newline is the end of the line, not a line of its own.
pub fn at_end(message: &str, input: &str) -> String {
    let past = input.bytes().filter(|b| *b == b'\n').count() + 1;
    message.replace(&format!("line {past} col 1)"), "the end of the line)")
}
