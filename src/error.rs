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
    #[error("unknown {kind} `{name}`; known {kind}s: {known}")]
    Unknown {
        /// "model", "cluster" or "GPU".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// A training job that cannot run at all (for example zero GPUs, or a
    /// global batch smaller than the data-parallel size).
    #[error("impossible job: {0}")]
    Job(String),
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

    /// Shorthand for [`InputError::Field`].
    pub fn field(file: impl Into<PathBuf>, field: &str, problem: impl Into<String>) -> Self {
        InputError::Field {
            file: file.into(),
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}
