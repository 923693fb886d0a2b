//! Test support: a block of a doc file that the code generates (between a
//! begin marker line and an end marker), kept equal to what the code says.

/// Fails when the block of `doc` (a path below the crate) between the line
/// starting with `begin` and `end` is not `want`; with
/// `NFGUARD_UPDATE_DOCS=1` rewrites it instead. `how` names the test to
/// run, for the failure message.
pub(crate) fn check_generated_block(doc: &str, begin: &str, end: &str, want: &str, how: &str) {
    let path = format!("{}/{doc}", env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(&path).unwrap();
    let start = docs
        .find(begin)
        .unwrap_or_else(|| panic!("{doc} has no {begin:?}"));
    let body = start + docs[start..].find('\n').unwrap() + 1;
    let stop = docs
        .find(end)
        .unwrap_or_else(|| panic!("{doc} has no {end:?}"));
    if docs[body..stop] == *want {
        return;
    }
    if std::env::var("NFGUARD_UPDATE_DOCS").as_deref() == Ok("1") {
        let updated = format!("{}{want}{}", &docs[..body], &docs[stop..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "{doc}'s generated block ({begin}) differs from the code; \
         NFGUARD_UPDATE_DOCS=1 {how} rewrites it.\nwant:\n{want}"
    );
}
