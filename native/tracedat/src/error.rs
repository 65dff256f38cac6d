//! Errors (the file cannot be decoded) and the import log (content skipped, the rest decoded).

use std::collections::BTreeMap;
use std::fmt;

/// The file cannot be decoded: what went wrong, where (byte offset in the file, when known) and what
/// the decoder expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub offset: Option<u64>,
    pub message: String,
    pub expected: Option<String>,
}

impl Error {
    pub fn at(offset: u64, message: impl Into<String>) -> Error {
        Error { offset: Some(offset), message: message.into(), expected: None }
    }

    pub fn nowhere(message: impl Into<String>) -> Error {
        Error { offset: None, message: message.into(), expected: None }
    }

    pub fn expected(mut self, what: impl Into<String>) -> Error {
        self.expected = Some(what.into());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = self.offset {
            write!(f, "at byte offset {o} (0x{o:x}): ")?;
        }
        f.write_str(&self.message)?;
        if let Some(e) = &self.expected {
            write!(f, "; expected {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Examples kept per kind of skipped content.
pub const MAX_EXAMPLES: usize = 5;

/// Where one skipped item was, and why it was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Example {
    pub offset: u64,
    pub detail: String,
}

/// Skipped content of one kind: how many items, the first few of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "python", derive(pyo3::IntoPyObject))]
pub struct Skipped {
    pub count: u64,
    pub examples: Vec<Example>,
}

/// Content the decoder could not use, counted per kind (meta `import_errors`): the rest of the file is
/// decoded, nothing is dropped silently.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportLog(pub BTreeMap<String, Skipped>);

impl ImportLog {
    pub fn add(&mut self, kind: &str, count: u64, offset: u64, detail: impl Into<String>) {
        let e = self.0.entry(kind.to_string()).or_default();
        e.count += count;
        if e.examples.len() < MAX_EXAMPLES {
            e.examples.push(Example { offset, detail: detail.into() });
        }
    }

    pub fn merge(&mut self, other: ImportLog) {
        for (kind, s) in other.0 {
            let e = self.0.entry(kind).or_default();
            e.count += s.count;
            let room = MAX_EXAMPLES.saturating_sub(e.examples.len());
            e.examples.extend(s.examples.into_iter().take(room));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_names_offset_and_expectation() {
        let e = Error::at(16, "bad").expected("good");
        assert_eq!(e.to_string(), "at byte offset 16 (0x10): bad; expected good");
        assert_eq!(Error::nowhere("x").to_string(), "x");
    }

    #[test]
    fn import_log_keeps_first_examples() {
        let mut log = ImportLog::default();
        for i in 0..8 {
            log.add("k", 2, i, "d");
        }
        let mut other = ImportLog::default();
        other.add("k", 1, 99, "late");
        log.merge(other);
        let k = &log.0["k"];
        assert_eq!(k.count, 17);
        assert_eq!(k.examples.len(), MAX_EXAMPLES);
        assert_eq!(k.examples[4].offset, 4);
    }
}
