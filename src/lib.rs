//! iptables-wrapper: decides on every call whether the host runs iptables
//! `legacy` (x_tables) or `nft` (nf_tables), then execs that backend.
//!
//! The binary (`src/main.rs`) is thin; each concern lives in its own module:
//! the override and mode names (`mode`), the host's link (`host_link`), the
//! kernel's state (`kernel`), the lock file (`xtables_lock`), the ordered
//! decision (`decision`), finding and running the backend (`backend`), the
//! wrapper's own file (`own_file`), the caller's standard descriptors and the
//! wrapper's own messages (`standard_fds`), the `detect` report (`report`), how text from outside is shown (`escape`),
//! link installation (`install`), showing and removing
//! what the backend the host does not use still holds (`stale`), the wrapper's runtime directory for state
//! kept between calls (`run_dir`), the record of warnings kept there
//! (`warnings_record`), where each setting comes from (`settings`), the
//! command line (`cli`) and the binary's memory allocator (`allocator`).

pub mod allocator;
pub mod backend;
pub mod cli;
pub mod command;
pub mod decision;
pub mod escape;
pub mod family;
pub mod host_link;
pub mod install;
pub mod kernel;
pub mod mode;
pub mod own_file;
pub mod report;
pub mod run_dir;
pub mod settings;
pub mod stale;
pub mod standard_fds;
pub mod warnings_record;
pub mod xtables_lock;
