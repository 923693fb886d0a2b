//! TODO: this subcommand's flags and entry point (owned by this module's helper).

#[derive(clap::Args, Debug)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
