//! Welcome: greets every new member of the workspace in a DM, with Block Kit. `team_join`
//! carries the user as an object, typed here as [`TeamJoin`].
//!
//!   SLACK_SIGNING_SECRET=dev-secret cargo run --example welcome
//!
//! Subscribe the app to `team_join` (scope `users:read`), with `im:write` and `chat:write`.

use slack_once::app::{App, Ctx, Message, TeamJoin, blocks};

pub fn app() -> App {
    App::new().team_join(|ctx: Ctx, join: TeamJoin| async move {
        if join.user.is_bot {
            return Ok(());
        }
        let user = join.user.id.clone();
        let name = join
            .user
            .real_name
            .clone()
            .or(join.user.name.clone())
            .unwrap_or_else(|| "there".into());
        let dm = ctx.open_conversation(&[&user]).await?;
        let welcome = Message::text(format!("Welcome, {name}!")).blocks([
            blocks::header(format!("Welcome, {name}!")),
            blocks::section(format!(
                "Hi <@{user}> :wave: Glad you are here. Say *help* in any channel I am in."
            )),
            blocks::divider(),
            blocks::context(["Sent once, however many times Slack tells me you joined."]),
        ]);
        ctx.post(&dm, welcome).await?;
        Ok(())
    })
}

fn main() -> std::process::ExitCode {
    slack_once::run(app())
}
