//! iptables-wrapper: decides on every call whether the host runs iptables
//! `legacy` (x_tables) or `nft` (nf_tables), then execs that backend.
//!
//! The binary (`src/main.rs`) is thin; each concern lives in its own module.
//! From the top down, each layer importing only those below it:
//!
//! - the command line (`cli`), the `detect` report (`report`) and its
//!   metrics (`metrics`), showing and removing what the backend the host
//!   does not use still holds (`stale`) and its backups' paths as the node
//!   names them (`on_node`);
//! - the ordered decision (`decision`, one module per source of evidence),
//!   and the record of warnings it leaves (`warnings_record`);
//! - the kernel's state (`kernel`: nf_tables through netlink, legacy
//!   x_tables through getsockopt, their save tools, the count cache);
//! - the host's link (`host_link`), finding and running the backend
//!   (`backend`), the wrapper's runtime directory for state kept between
//!   calls (`run_dir`), where each setting comes from (`settings`), link
//!   installation (`install`), the package a missing backend is in
//!   (`package_hint`), what reading the kernel's tables needs
//!   (`privilege`);
//! - the override and mode names (`mode`), the wrapped command (`command`),
//!   and at the bottom the lock file (`xtables_lock`), the wrapper's own
//!   file (`own_file`), the caller's standard descriptors and the wrapper's
//!   own messages (`standard_fds`), whether a path may be trusted (`trust`),
//!   the save tools' text (`save_text`), how text from outside is shown
//!   (`escape`), the caller's environment variables (`environment`), the
//!   address families (`family`) and the binary's memory allocator
//!   (`allocator`).
//!
//! Public are the modules the binary and the integration tests use, and
//! those their documentation links to; the others are the crate's own, so
//! the dead-code lint sees into them.

pub mod allocator;
pub mod backend;
pub mod cli;
pub mod command;
pub mod decision;
pub mod environment;
pub mod escape;
pub mod family;
pub(crate) mod host_link;
pub(crate) mod install;
pub(crate) mod interval;
pub mod kernel;
pub(crate) mod metrics;
pub mod mode;
pub(crate) mod on_node;
pub(crate) mod own_file;
pub(crate) mod package_hint;
pub mod privilege;
pub(crate) mod report;
pub mod run_dir;
pub mod save_text;
pub(crate) mod settings;
pub mod stale;
pub mod standard_fds;
pub mod temporary;
pub(crate) mod textfile;
pub mod trust;
pub mod warnings_record;
pub(crate) mod xtables_lock;
