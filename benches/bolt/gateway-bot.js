// The Bolt for JavaScript app of the report's gateway section: an HTTP Bolt app that answers an
// app_mention with a reaction and a reply in its thread, as tests/bots/bolt-js/app.js does. The
// report runs it twice, side by side: straight to Slack (Slack's signing secret, a bot token), and
// behind `slack-once gateway` with the adapter's few lines (SLACK_ONCE_API_URL set: the gateway's
// secret and placeholder token). Both runs answer only when the listener has ended
// (processBeforeResponse, which the adapter sets), so the sender's latency covers both writes.
//
// Bolt and the adapter are the test bots' install (scripts/bolt-bots.sh): one Bolt for both runs.
// Environment: PORT, SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN, and SLACK_API_URL (Slack: the
// stand-in, straight) or SLACK_ONCE_API_URL (the gateway). Prints `listening on <port>`.
'use strict';
const path = require('node:path');
const { createRequire } = require('node:module');

const bots = createRequire(path.join(__dirname, '../../tests/bots/bolt-js/package.json'));
const { App, LogLevel } = bots('@slack/bolt');

const env = process.env;
let options = {
  token: env.SLACK_BOT_TOKEN,
  signingSecret: env.SLACK_SIGNING_SECRET,
  logLevel: LogLevel.ERROR,
};
if (env.SLACK_ONCE_API_URL) {
  const { slackOnce } = bots('slack-once-bolt');
  options = slackOnce({ apiUrl: env.SLACK_ONCE_API_URL }).appOptions(options);
} else {
  options = { ...options, processBeforeResponse: true, clientOptions: { slackApiUrl: env.SLACK_API_URL } };
}
const app = new App(options);

app.event('app_mention', async ({ event, client, say }) => {
  await client.reactions.add({ channel: event.channel, timestamp: event.ts, name: 'eyes' });
  await say({ text: `Hello <@${event.user}>`, thread_ts: event.thread_ts || event.ts });
});

app.start({ port: Number(env.PORT), host: '127.0.0.1' }).then(
  (server) => process.stdout.write(`listening on ${server.address().port}\n`),
  (error) => {
    console.error(`gateway-bot: ${error.message}`);
    process.exit(1);
  },
);
