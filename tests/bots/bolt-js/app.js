'use strict';
// The Bolt for JavaScript bot that the gateway's tests run behind the gateway: an ordinary Bolt app
// with the slack-once-bolt adapter. The tests rely on exactly this behaviour (see ../README.md).
const { setTimeout: sleep } = require('node:timers/promises');
const { App, LogLevel } = require('@slack/bolt');
const { slackOnce } = require('slack-once-bolt');

/** Bolt's log on stderr: stdout carries only the `listening on <port>` line. */
const logger = {
  level: LogLevel.INFO,
  debug: () => {},
  info: (...msg) => console.error('[info]', ...msg),
  warn: (...msg) => console.error('[warn]', ...msg),
  error: (...msg) => console.error('[error]', ...msg),
  setLevel(level) { this.level = level; },
  getLevel() { return this.level; },
  setName() {},
};

const TICKET_MODAL = {
  type: 'modal',
  callback_id: 'ticket_modal',
  title: { type: 'plain_text', text: 'New ticket' },
  submit: { type: 'plain_text', text: 'File' },
  blocks: [
    {
      type: 'input',
      block_id: 'summary',
      label: { type: 'plain_text', text: 'Summary' },
      element: { type: 'plain_text_input', action_id: 'summary_text' },
    },
  ],
};

function buildApp(env) {
  const once = slackOnce({ apiUrl: env.SLACK_ONCE_API_URL });
  const app = new App(once.appOptions({
    token: env.SLACK_BOT_TOKEN,
    signingSecret: env.SLACK_SIGNING_SECRET,
    logger,
  }));

  app.event('app_mention', async ({ event, client, say }) => {
    await client.reactions.add({ channel: event.channel, timestamp: event.ts, name: 'eyes' });
    if (env.BOT_EXIT_AFTER_REACTION === '1') {
      process.kill(process.pid, 'SIGKILL'); // dies between its two writes
    }
    if (env.BOT_REPLY_DELAY_MS) await sleep(Number(env.BOT_REPLY_DELAY_MS));
    await say({ text: `Hello <@${event.user}>`, thread_ts: event.thread_ts || event.ts });
  });

  app.command('/ticket', async ({ command, ack, respond }) => {
    await ack({ response_type: 'ephemeral', text: 'Filing your ticket…' });
    await respond({ response_type: 'in_channel', text: `Ticket: ${command.text}` });
  });

  app.shortcut('new_ticket', async ({ shortcut, client, ack }) => {
    await client.views.open({ trigger_id: shortcut.trigger_id, view: TICKET_MODAL });
    await ack();
  });

  app.view('ticket_modal', async ({ view, client, ack }) => {
    const summary = view.state.values.summary.summary_text.value ?? '';
    if (summary.length < 3) {
      await ack({ response_action: 'errors', errors: { summary: 'Say a little more' } });
      return;
    }
    await ack();
    await client.chat.postMessage({ channel: env.BOT_TICKET_CHANNEL || 'C0TICKETS', text: `New ticket: ${summary}` });
  });

  // A Workflow Builder step: a post with the step's client, then its completion.
  app.function('summarize', async ({ inputs, client, complete }) => {
    await client.chat.postMessage({ channel: env.BOT_TICKET_CHANNEL || 'C0TICKETS', text: `Summary of ${inputs.text}` });
    await complete({ outputs: { summary: `${inputs.text}: up` } });
  });

  return app;
}

async function main(env) {
  for (const name of ['SLACK_BOT_TOKEN', 'SLACK_SIGNING_SECRET']) {
    if (!env[name]) throw new Error(`${name} is not set`);
  }
  // No call at start: the adapter authorizes each request with what the gateway's forward
  // names. So the bot and the gateway may start in either order.
  const app = buildApp(env);
  const server = await app.start({ port: Number(env.PORT || 3000), host: '127.0.0.1' });
  process.stdout.write(`listening on ${server.address().port}\n`);
}

main(process.env).catch((error) => {
  console.error(`bolt-js test bot: ${error.message}`);
  process.exit(1);
});
