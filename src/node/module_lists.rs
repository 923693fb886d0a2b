//! What a kernel's module lists (`modules.builtin`, `modules.dep`) and its
//! config say of one module: pure, shared by the table modules (`kmod`)
//! and the xtables extensions (`xt_modules`).

use crate::api::ModuleState;

pub(super) fn state(
    loaded: Option<bool>,
    from_files: Option<ModuleState>,
    modules_supported: Option<bool>,
) -> ModuleState {
    if loaded == Some(true) {
        return ModuleState::Loaded;
    }
    if let Some(s) = from_files {
        return s;
    }
    // A kernel that cannot load modules has everything it will ever have.
    if modules_supported == Some(false) && loaded == Some(false) {
        return ModuleState::Absent;
    }
    ModuleState::Unknown
}

/// One module's state from the module lists (both needed: a module in
/// neither is absent), else from the first of `symbols` the config names
/// (a kernel config that does not name it was built without it). None:
/// nothing to read.
pub(super) fn installed_state(
    builtin: Option<&str>,
    dep: Option<&str>,
    config: Option<&str>,
    stem: &str,
    symbols: &[&str],
) -> Option<ModuleState> {
    if let (Some(builtin), Some(dep)) = (builtin, dep) {
        return Some(if lists(builtin, stem) {
            ModuleState::Builtin
        } else if lists(dep, stem) {
            ModuleState::Module
        } else {
            ModuleState::Absent
        });
    }
    let cfg = config?;
    Some(match symbols.iter().find_map(|s| config_value(cfg, s)) {
        Some('y') => ModuleState::Builtin,
        Some('m') => ModuleState::Module,
        _ => ModuleState::Absent,
    })
}

/// Whether a modules.builtin / modules.dep text names `stem` (`-` and `_`
/// are the same in module names; `.ko` may carry a compression suffix).
pub(super) fn lists(text: &str, stem: &str) -> bool {
    text.lines().any(|line| {
        let path = line.split(':').next().unwrap_or("").trim();
        let file = path.rsplit('/').next().unwrap_or("");
        let Some((name, _)) = file.split_once(".ko") else {
            return false;
        };
        name.replace('-', "_") == stem
    })
}

/// `y`, `m`, or `n` ("is not set") for a symbol the config mentions.
pub(super) fn config_value(cfg: &str, symbol: &str) -> Option<char> {
    cfg.lines().find_map(|line| {
        if let Some(v) = line.strip_prefix(symbol).and_then(|r| r.strip_prefix('=')) {
            return v.chars().next();
        }
        (line.strip_prefix("# ")?.strip_prefix(symbol)? == " is not set").then_some('n')
    })
}
