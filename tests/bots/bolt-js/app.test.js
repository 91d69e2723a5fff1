'use strict';
// The test bot's behaviour, the one the gateway's tests rely on: app.js run as its own process
// behind the adapter's HTTP stand-in for the gateway.
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const path = require('node:path');
const test = require('node:test');
const {
  GatewayStandin, forward, mentionEnvelope, commandForm, PLACEHOLDER_TOKEN, GATEWAY_SECRET,
} = require('../../../adapters/bolt-js/test/gateway-standin');

const FORM_TYPE = 'application/x-www-form-urlencoded';

/** Starts the stand-in and `node app.js` on a free port; both stop after the test. */
async function startBot(t, env = {}) {
  const standin = await new GatewayStandin().start();
  t.after(() => standin.stop());
  const child = spawn(process.execPath, [path.join(__dirname, 'app.js')], {
    env: {
      PATH: process.env.PATH, PORT: '0', SLACK_ONCE_API_URL: standin.apiUrl('configured'),
      SLACK_BOT_TOKEN: PLACEHOLDER_TOKEN, SLACK_SIGNING_SECRET: GATEWAY_SECRET, ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = once(child, 'exit');
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  });
  let stdout = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => { stdout += chunk; });
  let stderr = '';
  child.stderr.on('data', (chunk) => { stderr += chunk; });
  const end = Date.now() + 10_000;
  while (!stdout.includes('\n')) {
    if (Date.now() > end || child.exitCode !== null) assert.fail(`the bot did not start: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const port = /^listening on (\d+)\n$/.exec(stdout)?.[1];
  assert.ok(port, `stdout was ${JSON.stringify(stdout)}`);
  return { standin, child, exited, stdout: () => stdout, botUrl: `http://127.0.0.1:${port}/slack/events` };
}

function interaction(payload) {
  return { body: new URLSearchParams({ payload: JSON.stringify(payload) }).toString(), contentType: FORM_TYPE };
}

function submission(summary) {
  return interaction({
    type: 'view_submission', team: { id: 'T0001', domain: 'acme' }, user: { id: 'U0001', team_id: 'T0001' },
    api_app_id: 'A0001', token: 'unused', trigger_id: '1.2.sub',
    view: {
      id: 'V0001', type: 'modal', callback_id: 'ticket_modal', team_id: 'T0001', app_id: 'A0001',
      state: { values: { summary: { summary_text: { type: 'plain_text_input', value: summary } } } },
    },
  });
}

test('the bot prints one line, `listening on <port>`, and makes no call when it starts', async (t) => {
  const { standin, stdout } = await startBot(t);
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.deepEqual(standin.apiCalls('auth.test'), [], 'the adapter authorizes from the forward: no auth.test');
  assert.match(stdout(), /^listening on \d+\n$/);
});

test('a mention gets the eyes reaction, then a reply in its thread, both in the run', async (t) => {
  const { standin, botUrl } = await startBot(t);
  const body = JSON.parse(mentionEnvelope({ channel: 'C0M', ts: '1700000010.000100' }));
  body.event.thread_ts = '1700000009.000900';
  const answer = await forward(botUrl, { body: JSON.stringify(body), contentType: 'application/json', run: 'run-m', apiUrl: standin.apiUrl() });
  assert.equal(answer.status, 200);
  const calls = standin.apiCalls().filter((c) => c.method !== 'auth.test');
  assert.deepEqual(calls.map((c) => [c.method, c.headers['x-slack-once-request']]), [['reactions.add', 'run-m'], ['chat.postMessage', 'run-m']]);
  assert.deepEqual(calls[0].args, { channel: 'C0M', timestamp: '1700000010.000100', name: 'eyes', team_id: 'T0001' });
  assert.equal(calls[1].args.text, 'Hello <@U0001>');
  assert.equal(calls[1].args.thread_ts, '1700000009.000900');
  assert.equal(calls[1].args.channel, 'C0M');
});

test('with BOT_EXIT_AFTER_REACTION=1 the bot dies after the reaction and before the reply', async (t) => {
  const { standin, botUrl, exited } = await startBot(t, { BOT_EXIT_AFTER_REACTION: '1' });
  await assert.rejects(forward(botUrl, { body: mentionEnvelope({ channel: 'C0X', ts: '1700000011.000100' }), contentType: 'application/json', run: 'run-x', apiUrl: standin.apiUrl() }));
  const [, signal] = await exited;
  assert.equal(signal, 'SIGKILL');
  assert.deepEqual(standin.apiCalls().filter((c) => c.method !== 'auth.test').map((c) => c.method), ['reactions.add']);
});

test('with BOT_REPLY_DELAY_MS the reply comes that long after the reaction', async (t) => {
  const { standin, botUrl } = await startBot(t, { BOT_REPLY_DELAY_MS: '400' });
  const answer = await forward(botUrl, { body: mentionEnvelope({ channel: 'C0D', ts: '1700000012.000100' }), contentType: 'application/json', run: 'run-d', apiUrl: standin.apiUrl() });
  const [reaction] = standin.apiCalls('reactions.add');
  const [reply] = standin.apiCalls('chat.postMessage');
  assert.ok(reply.at - reaction.at >= 400, `${reply.at - reaction.at} ms`);
  assert.ok(answer.at >= reply.at);
});

test('/ticket is answered with its acknowledgement, then a respond() through the gateway', async (t) => {
  const { standin, botUrl } = await startBot(t);
  const answer = await forward(botUrl, {
    body: commandForm({ text: 'printer on fire', responseUrl: `${standin.base}/hooks/commands/1` }), contentType: FORM_TYPE, run: 'run-t', apiUrl: standin.apiUrl(),
  });
  assert.deepEqual(JSON.parse(answer.text), { response_type: 'ephemeral', text: 'Filing your ticket…' });
  const calls = standin.calls.filter((c) => c.method !== 'auth.test');
  assert.deepEqual(calls.map((c) => [c.path, c.headers['x-slack-once-request']]), [['/gw/api/respond', 'run-t']]);
  assert.deepEqual(JSON.parse(calls[0].raw), { response_type: 'in_channel', text: 'Ticket: printer on fire' });
});

test('the new_ticket shortcut opens the ticket modal, then acknowledges', async (t) => {
  const { standin, botUrl } = await startBot(t);
  const answer = await forward(botUrl, {
    ...interaction({ type: 'shortcut', callback_id: 'new_ticket', trigger_id: '1.2.short', team: { id: 'T0001' }, user: { id: 'U0001' }, api_app_id: 'A0001', token: 'unused' }),
    run: 'run-s', apiUrl: standin.apiUrl(),
  });
  assert.equal(answer.status, 200);
  assert.equal(answer.text, '');
  const [open] = standin.apiCalls('views.open');
  assert.equal(open.headers['x-slack-once-request'], 'run-s');
  assert.equal(open.args.trigger_id, '1.2.short');
  const view = JSON.parse(open.args.view);
  assert.equal(view.callback_id, 'ticket_modal');
  assert.deepEqual([view.blocks[0].block_id, view.blocks[0].element.type, view.blocks[0].element.action_id], ['summary', 'plain_text_input', 'summary_text']);
});

test('a submission shorter than 3 characters is answered with errors and posts nothing', async (t) => {
  const { standin, botUrl } = await startBot(t);
  const answer = await forward(botUrl, { ...submission('ab'), run: 'run-v1', apiUrl: standin.apiUrl() });
  assert.deepEqual(JSON.parse(answer.text), { response_action: 'errors', errors: { summary: 'Say a little more' } });
  assert.deepEqual(standin.apiCalls('chat.postMessage'), []);
});

test('a submission of 3 characters or more is acknowledged and posts the ticket to BOT_TICKET_CHANNEL', async (t) => {
  const { standin, botUrl } = await startBot(t, { BOT_TICKET_CHANNEL: 'C0OPS' });
  const answer = await forward(botUrl, { ...submission('disk'), run: 'run-v2', apiUrl: standin.apiUrl() });
  assert.equal(answer.status, 200);
  assert.equal(answer.text, '');
  const [post] = standin.apiCalls('chat.postMessage');
  assert.deepEqual([post.args.channel, post.args.text, post.headers['x-slack-once-request']], ['C0OPS', 'New ticket: disk', 'run-v2']);
});
