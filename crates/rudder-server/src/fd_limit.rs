//! Raising the process's soft file-descriptor limit to its hard limit, as Go's runtime does.

/// What [`raise_fd_limit`] found and did. `None` stands for no limit (`RLIM_INFINITY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit before the call.
    pub before: Option<u64>,
    /// The soft limit after the call.
    pub after: Option<u64>,
    /// The hard limit, the most the soft limit may be raised to without privileges.
    pub hard: Option<u64>,
}

impl FdLimit {
    /// Whether the call raised the soft limit.
    pub fn raised(&self) -> bool {
        self.before != self.after
    }
}

/// Why [`raise_fd_limit`] could not raise the limit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FdLimitError {
    /// The kernel refused the new soft limit (a sandbox forbidding `setrlimit`, say).
    /// Retrying does not help; the process keeps its old limit, which still works.
    #[error("cannot raise the soft file descriptor limit from {from:?} to {to:?}")]
    Set {
        /// The soft limit in place.
        from: Option<u64>,
        /// The limit asked for.
        to: Option<u64>,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, and says what it did.
///
/// Containers commonly start with a soft limit of 1024 and a much higher hard limit; a
/// server with many clients (and watches, and files) runs out of descriptors at the soft
/// one. Go's runtime raises it at start-up since Go 1.19, so Go operators never see the 1024;
/// this does the same for a Rust process. It changes nothing when the soft limit already
/// equals the hard one, or when the hard limit is unlimited (Linux refuses an unlimited
/// descriptor limit). The limit is process-wide and inherited by child processes: call it
/// once, at start-up.
#[cfg(unix)]
pub fn raise_fd_limit() -> Result<FdLimit, FdLimitError> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let unchanged = FdLimit {
        before: limit.current,
        after: limit.current,
        hard: limit.maximum,
    };
    let Some(hard) = limit.maximum else {
        return Ok(unchanged);
    };
    if limit.current.is_some_and(|soft| soft >= hard) {
        return Ok(unchanged);
    }
    let wanted = Rlimit {
        current: Some(hard),
        maximum: Some(hard),
    };
    setrlimit(Resource::Nofile, wanted).map_err(|errno| FdLimitError::Set {
        from: limit.current,
        to: Some(hard),
        source: errno.into(),
    })?;
    Ok(FdLimit {
        before: limit.current,
        after: getrlimit(Resource::Nofile).current,
        hard: limit.maximum,
    })
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; on platforms without
/// resource limits it changes nothing and reports no limit.
#[cfg(not(unix))]
pub fn raise_fd_limit() -> Result<FdLimit, FdLimitError> {
    Ok(FdLimit {
        before: None,
        after: None,
        hard: None,
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn raising_twice_leaves_the_soft_limit_at_the_hard_one() {
        let first = raise_fd_limit().expect("raise the limit");
        assert!(first.after >= first.before, "{first:?}");
        let second = raise_fd_limit().expect("raise the limit again");
        assert!(!second.raised(), "{second:?}");
        assert_eq!(second.before, first.after);
        if let (Some(hard), Some(after)) = (second.hard, second.after) {
            assert_eq!(after, hard);
        }
    }
}
