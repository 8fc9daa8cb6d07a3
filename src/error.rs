//! Error types shared by the loaders and the command line.
//!
//! Every error that a user can cause names the file (or flag), the field and
//! what is wrong, in one sentence. Nothing in meshplan panics on bad input.

use std::path::PathBuf;

/// A problem with an input file or a flag value.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A TOML file could not be read from disk.
    #[error("{file}: cannot read the file")]
    Io {
        /// The file that failed.
        file: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// A file could not be written (its folder is missing, or not
    /// writable).
    #[error("{}: cannot write the file{}", .file.display(), match .file.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => format!(" (folder {} does not exist)", d.display()),
        _ => String::new(),
    })]
    Write {
        /// The file that failed.
        file: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// A TOML file is not valid TOML, or a field has the wrong type or is
    /// missing. `detail` is the parser's message, which names the key and the
    /// line.
    #[error("{file}: {detail}")]
    Syntax {
        /// The file that failed.
        file: PathBuf,
        /// The parser's message (it names the key and the line and column).
        detail: String,
    },
    /// A field parsed but its value is impossible (zero, negative, absurd,
    /// or inconsistent with another field).
    #[error("{file}: field `{field}`: {problem}")]
    Field {
        /// The file (or `--flag` for command-line values).
        file: PathBuf,
        /// The dotted field name, e.g. `architecture.hidden`.
        field: String,
        /// What is wrong, with the value.
        problem: String,
    },
    /// A name (model, cluster, GPU) that is not in the catalog.
    #[error("unknown {kind} `{}`; {}known {kind}s: {known}", crate::limits::echo(.name), .suggestion.as_ref().map(|s| format!("did you mean `{s}`? ")).unwrap_or_default())]
    Unknown {
        /// "model", "cluster" or "GPU".
        kind: &'static str,
        /// The name asked for (cut to [`crate::limits::MAX_NAME_ECHO`]
        /// characters in the message).
        name: String,
        /// The known name closest to it, when one is close (a typo).
        suggestion: Option<String>,
        /// The known names, comma separated.
        known: String,
    },
    /// A training job that cannot run at all (for example zero GPUs, or a
    /// global batch smaller than the data-parallel size).
    #[error("impossible job: {0}")]
    Job(String),
}

/// The candidate closest to `name`, for "did you mean": one whose name
/// ends in `-name` (`7b` → `llama2-7b`, where the edit distance would pick
/// `70b`; the shortest such, then the first), else the closest by
/// case-insensitive edit distance, at most one edit per four characters
/// and at least one.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let name = name.to_ascii_lowercase();
    if name.len() > 4 * crate::limits::MAX_NAME_ECHO {
        return None;
    }
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let suffix = format!("-{name}");
    if let Some(c) = candidates
        .iter()
        .filter(|c| c.to_ascii_lowercase().ends_with(&suffix))
        .min_by_key(|c| c.len())
    {
        return Some(c.to_string());
    }
    let limit = (name.chars().count() / 4).max(1);
    candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(&name, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.to_string())
}

impl InputError {
    /// Parse `text`, the contents of `file`, as TOML into `T`; a syntax
    /// error, unknown key or missing field is [`InputError::Syntax`] naming
    /// the file.
    ///
    /// # Errors
    /// [`InputError::Syntax`].
    pub fn parse_toml<T: serde::de::DeserializeOwned>(
        text: &str,
        file: &std::path::Path,
    ) -> Result<T, InputError> {
        toml::from_str(text).map_err(|e| InputError::Syntax {
            file: file.to_path_buf(),
            detail: e.to_string(),
        })
    }

    /// Parse `text` as TOML into a `T` ([`InputError::parse_toml`]), then
    /// `check` it.
    ///
    /// # Errors
    /// The syntax error, or the first error of `check`.
    pub fn parse_checked<T: serde::de::DeserializeOwned>(
        text: &str,
        file: &std::path::Path,
        check: impl FnOnce(&T, &std::path::Path) -> Result<(), InputError>,
    ) -> Result<T, InputError> {
        let value: T = InputError::parse_toml(text, file)?;
        check(&value, file)?;
        Ok(value)
    }

    /// Shorthand for [`InputError::Field`].
    pub fn field(file: impl Into<PathBuf>, field: &str, problem: impl Into<String>) -> Self {
        InputError::Field {
            file: file.into(),
            field: field.to_string(),
            problem: problem.into(),
        }
    }

    /// `Ok` when `ok`; otherwise [`InputError::field`] with the problem
    /// `problem` words (called only then).
    ///
    /// # Errors
    /// That field error when `ok` is false.
    pub fn unless(
        ok: bool,
        file: &std::path::Path,
        field: &str,
        problem: impl FnOnce() -> String,
    ) -> Result<(), InputError> {
        if ok {
            Ok(())
        } else {
            Err(InputError::field(file, field, problem()))
        }
    }
}

#[cfg(test)]
mod closest_tests {
    use super::closest;

    /// A size alone names the model of that size: `7b` is `llama2-7b`,
    /// not `70b` one edit away; a typo still gets the edit-distance match.
    #[test]
    fn a_size_suffix_beats_an_edit() {
        let names = [
            "70b",
            "llama3-70b",
            "llama2-7b",
            "llama-2-7b",
            "gpt-1.7b",
            "8b",
        ];
        assert_eq!(closest("7b", names).as_deref(), Some("llama2-7b"));
        assert_eq!(closest("1.7b", names).as_deref(), Some("gpt-1.7b"));
        assert_eq!(closest("llama3-7b", names).as_deref(), Some("llama3-70b"));
        assert_eq!(closest("zz", names), None);
    }
}
