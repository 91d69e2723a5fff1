'use strict';
// A real Bolt 5 app with the adapter, behind a real HTTP server in the gateway's part.
const assert = require('node:assert/strict');
const { setTimeout: delay } = require('node:timers/promises');
const test = require('node:test');
const { App, LogLevel, webApi } = require('@slack/bolt');
const { slackOnce } = require('..');
const { GatewayStandin, forward, mentionEnvelope, commandForm, PLACEHOLDER_TOKEN, GATEWAY_SECRET } = require('./gateway-standin');

const JSON_TYPE = 'application/json';
const FORM_TYPE = 'application/x-www-form-urlencoded';

/** Starts the gateway's stand-in and a Bolt app behind it on 127.0.0.1; both stop after the test. */
async function setUp(t, register, { logger, retryConfig = { retries: 0 } } = {}) {
  const standin = await new GatewayStandin().start();
  t.after(() => standin.stop());
  const once = slackOnce({ apiUrl: standin.apiUrl('configured') });
  const app = new App(once.appOptions({
    token: PLACEHOLDER_TOKEN,
    signingSecret: GATEWAY_SECRET,
    botId: 'B0BOT',
    botUserId: 'UBOT',
    logger,
    logLevel: logger ? undefined : LogLevel.ERROR,
    clientOptions: { retryConfig },
  }));
  register(app);
  const server = await app.start({ port: 0, host: '127.0.0.1' });
  t.after(() => app.stop());
  return { standin, app, botUrl: `http://127.0.0.1:${server.address().port}/slack/events` };
}

function mention(standin, { run, channel, ts, prefix = 'gw' }) {
  return { body: mentionEnvelope({ channel, ts }), contentType: JSON_TYPE, run, apiUrl: standin.apiUrl(prefix) };
}

/** Resolves when `predicate()` holds; fails the test after `ms`. */
async function until(predicate, what, ms = 5000) {
  const end = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await delay(5);
  }
}

test('two concurrent requests each send their own run on every call, to their own gateway', async (t) => {
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ event, client, say }) => {
      await client.reactions.add({ channel: event.channel, timestamp: event.ts, name: 'eyes' });
      // Each waits for the other's first call, so that the two requests' calls interleave.
      await until(() => standin.apiCalls('reactions.add').length === 2, "the other request's first call");
      await app.client.conversations.info({ channel: event.channel });
      await say({ text: 'Hello <@U0001>', thread_ts: event.ts });
    });
  });
  const answers = await Promise.all([
    forward(botUrl, mention(standin, { run: 'run-a', channel: 'C0A', ts: '1700000001.000100', prefix: 'gw-a' })),
    forward(botUrl, mention(standin, { run: 'run-b', channel: 'C0B', ts: '1700000002.000200', prefix: 'gw-b' })),
  ]);
  assert.deepEqual(answers.map((a) => a.status), [200, 200]);
  const calls = standin.apiCalls();
  // Interleaved: both requests' first calls come before either's second.
  assert.deepEqual(calls.map((c) => c.method).slice(0, 2), ['reactions.add', 'reactions.add']);
  assert.equal(calls.length, 6);
  for (const call of calls) {
    const own = call.args.channel === 'C0A' ? { run: 'run-a', prefix: 'gw-a' } : { run: 'run-b', prefix: 'gw-b' };
    assert.equal(call.headers['x-slack-once-request'], own.run, `${call.method} in ${call.args.channel}`);
    assert.equal(call.prefix, own.prefix, `${call.method} in ${call.args.channel}`);
    assert.equal(call.headers.authorization, `Bearer ${PLACEHOLDER_TOKEN}`);
  }
});

test("a call made while another request has many calls in flight is not queued behind them and names its own run", async (t) => {
  let release;
  const released = new Promise((resolve) => { release = resolve; });
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ event, client }) => {
      if (event.channel === 'C0A') {
        // More calls at once than web-api's default cap of 100 concurrent requests.
        await Promise.all(Array.from({ length: 120 }, () => client.conversations.info({ channel: 'C0A' })));
      } else {
        await client.chat.postMessage({ channel: event.channel, text: 'no waiting' });
      }
    });
  });
  standin.answers.set('conversations.info', async (call) => {
    await released;
    return { body: { ok: true, channel: { id: call.args.channel } } };
  });
  t.after(() => release());
  const first = forward(botUrl, mention(standin, { run: 'run-a', channel: 'C0A', ts: '1700000001.000100' }));
  await until(() => standin.apiCalls('conversations.info').length >= 100, "the first request's calls");
  const second = forward(botUrl, mention(standin, { run: 'run-b', channel: 'C0B', ts: '1700000002.000200' }));
  await until(() => standin.apiCalls('chat.postMessage').length === 1, "the second request's post, made while the first request's calls are in flight");
  const [post] = standin.apiCalls('chat.postMessage');
  assert.equal(post.headers['x-slack-once-request'], 'run-b');
  assert.equal((await second).status, 200);
  release();
  assert.equal((await first).status, 200);
  const reads = standin.apiCalls('conversations.info');
  assert.equal(reads.length, 120);
  assert.ok(reads.every((c) => c.headers['x-slack-once-request'] === 'run-a'));
});

test("one request's rate-limited read does not hold another request's call, nor lend it its run", async (t) => {
  const errors = [];
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ event, client }) => {
      if (event.channel === 'C0A') {
        try {
          await client.conversations.info({ channel: 'C0A' });
        } catch (error) {
          errors.push(error);
        }
      } else {
        await client.chat.postMessage({ channel: event.channel, text: 'no waiting' });
      }
    });
  });
  standin.answers.set('conversations.info', async () => ({ status: 429, headers: { 'retry-after': '1' }, body: { ok: false, error: 'ratelimited' } }));
  const first = forward(botUrl, mention(standin, { run: 'run-a', channel: 'C0A', ts: '1700000001.000100' }));
  await until(() => standin.apiCalls('conversations.info').length === 1, "the first request's read");
  await delay(50);
  await forward(botUrl, mention(standin, { run: 'run-b', channel: 'C0B', ts: '1700000002.000200' }));
  await first;
  const [post] = standin.apiCalls('chat.postMessage');
  assert.equal(post.headers['x-slack-once-request'], 'run-b');
  assert.equal(errors.length, 1);
  assert.ok(errors[0] instanceof webApi.WebAPIRateLimitedError, `${errors[0]}`);
});

test("the client's own retry of a call after a 5xx names the same run, while another request's calls go on", async (t) => {
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ event, say }) => {
      await say({ text: `Hello from ${event.channel}`, thread_ts: event.ts });
    });
  }, { retryConfig: { retries: 1, minTimeout: 1000, maxTimeout: 1000 } });
  let failed = false;
  standin.answers.set('chat.postMessage', async (call) => {
    if (call.args.channel === 'C0A' && !failed) {
      failed = true;
      return { status: 503, body: { ok: false, error: 'slack_once_unavailable' } };
    }
    return { body: { ok: true, channel: call.args.channel, ts: '1700000009.000900' } };
  });
  const first = forward(botUrl, mention(standin, { run: 'run-a', channel: 'C0A', ts: '1700000001.000100' }));
  await until(() => failed, "the first request's failed post");
  await forward(botUrl, mention(standin, { run: 'run-b', channel: 'C0B', ts: '1700000002.000200' }));
  assert.equal((await first).status, 200);
  const posts = standin.apiCalls('chat.postMessage');
  assert.deepEqual(posts.map((c) => [c.args.channel, c.headers['x-slack-once-request']]), [['C0A', 'run-a'], ['C0B', 'run-b'], ['C0A', 'run-a']]);
  assert.equal(posts[0].raw, posts[2].raw, 'the retry sends the same arguments');
});

test('respond() is a POST to {api-url}respond with the run and the body, never to the response_url', async (t) => {
  const { standin, botUrl } = await setUp(t, (app) => {
    app.command('/ticket', async ({ command, ack, respond }) => {
      await ack({ response_type: 'ephemeral', text: 'Filing your ticket…' });
      await respond({ response_type: 'in_channel', text: `Ticket: ${command.text}` });
    });
  });
  const responseUrl = `${standin.base}/hooks/commands/T0001/1/secret`;
  const answer = await forward(botUrl, {
    body: commandForm({ text: 'printer on fire', responseUrl }), contentType: FORM_TYPE, run: 'run-c', apiUrl: standin.apiUrl('gw-c'),
  });
  assert.equal(answer.status, 200);
  assert.deepEqual(JSON.parse(answer.text), { response_type: 'ephemeral', text: 'Filing your ticket…' });
  assert.deepEqual(standin.calls.map((c) => c.path), ['/gw-c/api/respond']);
  const [call] = standin.calls;
  assert.equal(call.headers['x-slack-once-request'], 'run-c');
  assert.equal(call.headers.authorization, `Bearer ${PLACEHOLDER_TOKEN}`);
  assert.match(call.headers['content-type'], /^application\/json/);
  assert.deepEqual(JSON.parse(call.raw), { response_type: 'in_channel', text: 'Ticket: printer on fire' });
});

test("the gateway's own errors surface as web-api's platform errors, from respond() and from the client", async (t) => {
  const errors = [];
  const { standin, botUrl } = await setUp(t, (app) => {
    app.command('/ticket', async ({ ack, respond, client }) => {
      await ack();
      await respond({ text: 'late' }).catch((error) => errors.push(error));
      await client.chat.postMessage({ channel: 'C0001', text: 'other' }).catch((error) => errors.push(error));
    });
  });
  standin.answers.set('respond', async () => ({ body: { ok: false, error: 'slack_once_request_ended' } }));
  standin.answers.set('chat.postMessage', async () => ({ body: { ok: false, error: 'slack_once_different_write' } }));
  const answer = await forward(botUrl, {
    body: commandForm({ text: 'x', responseUrl: `${standin.base}/hooks/1` }), contentType: FORM_TYPE, run: 'run-e', apiUrl: standin.apiUrl(),
  });
  assert.equal(answer.status, 200);
  assert.equal(errors.length, 2);
  for (const error of errors) {
    assert.ok(error instanceof webApi.WebAPIPlatformError, `${error}`);
    assert.equal(error.code, webApi.ErrorCode.PlatformError);
  }
  assert.deepEqual(errors.map((e) => e.data.error), ['slack_once_request_ended', 'slack_once_different_write']);
});

test('the answer to a forward comes only after the listener has ended', async (t) => {
  let listenerEndedAt;
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ event, client, say }) => {
      await client.reactions.add({ channel: event.channel, timestamp: event.ts, name: 'eyes' });
      await delay(300);
      await say({ text: 'Hello', thread_ts: event.ts });
      listenerEndedAt = performance.now();
    });
    app.command('/ticket', async ({ ack, respond }) => {
      await ack({ text: 'Filing your ticket…' });
      await delay(300);
      await respond({ text: 'Ticket: done' });
      listenerEndedAt = performance.now();
    });
  });
  const event = await forward(botUrl, mention(standin, { run: 'run-p', channel: 'C0P', ts: '1700000003.000300' }));
  assert.equal(event.status, 200);
  assert.ok(listenerEndedAt !== undefined && event.at >= listenerEndedAt, 'the event was answered before its listener ended');
  assert.ok(event.at >= standin.apiCalls('chat.postMessage')[0].at);

  listenerEndedAt = undefined;
  const command = await forward(botUrl, {
    body: commandForm({ text: 'x', responseUrl: `${standin.base}/hooks/2` }), contentType: FORM_TYPE, run: 'run-q', apiUrl: standin.apiUrl(),
  });
  assert.equal(command.status, 200);
  assert.deepEqual(JSON.parse(command.text), { text: 'Filing your ticket…' });
  assert.ok(listenerEndedAt !== undefined && command.at >= listenerEndedAt, 'the command was answered before its listener ended');
});

test('a request signed with another secret is refused and reaches no listener', async (t) => {
  let ran = false;
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ say }) => {
      ran = true;
      await say('should not be said');
    });
  });
  const answer = await forward(botUrl, { ...mention(standin, { run: 'run-w', channel: 'C0W', ts: '1700000004.000400' }), secret: 'not-the-gateway-secret' });
  assert.equal(answer.status, 401);
  await delay(50);
  assert.equal(ran, false);
  assert.deepEqual(standin.calls, []);
});

test('a forward whose run and address the gateway did not sign is refused and makes no call', async (t) => {
  let ran = false;
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ say }) => {
      ran = true;
      await say('should not be said');
    });
  });
  // A forward replayed with an address of its own: the bot's calls would carry its token there.
  const replayed = { ...mention(standin, { run: 'run-x', channel: 'C0X', ts: '1700000004.000900' }), headersSecret: 'not-the-gateway-secret' };
  const answer = await forward(botUrl, replayed);
  assert.notEqual(answer.status, 200);
  await delay(50);
  assert.equal(ran, false);
  assert.deepEqual(standin.calls, []);
});

test('a call outside any request goes to the configured API URL without a run', async (t) => {
  const { standin, app, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ say }) => {
      await say('inside');
    });
  });
  await app.client.chat.postMessage({ channel: 'C0S', text: 'scheduled, before any request' });
  await forward(botUrl, mention(standin, { run: 'run-i', channel: 'C0I', ts: '1700000005.000500' }));
  await app.client.chat.postMessage({ channel: 'C0S', text: 'scheduled, after a request' });
  const calls = standin.apiCalls('chat.postMessage');
  assert.deepEqual(calls.map((c) => [c.args.text, c.prefix, c.headers['x-slack-once-request']]), [
    ['scheduled, before any request', 'configured', undefined],
    ['inside', 'gw', 'run-i'],
    ['scheduled, after a request', 'configured', undefined],
  ]);
  assert.ok(calls.every((c) => c.headers.authorization === `Bearer ${PLACEHOLDER_TOKEN}`));
});

test("the request's identity is the listener's context.slackOnce", async (t) => {
  let seen;
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ context }) => {
      seen = context.slackOnce;
    });
  });
  const deadline = Date.now() + 30_000;
  await forward(botUrl, { ...mention(standin, { run: 'run-k', channel: 'C0K', ts: '1700000006.000600' }), key: 'T0001:C0K:1700000006.000600', attempt: 2, deadline });
  assert.deepEqual(seen, {
    key: 'T0001:C0K:1700000006.000600', attempt: 2, deadline, request: 'run-k', apiUrl: standin.apiUrl(), team: undefined, botUser: undefined,
  });
});

test("Bolt's authorization is the workspace and bot user the gateway names, with no auth.test", async (t) => {
  const seen = [];
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ context }) => {
      seen.push([context.teamId, context.botUserId, context.botToken]);
    });
  });
  for (const [team, botUser, ts] of [['T0WSA', 'U0BOTA', '1700000007.000700'], ['T0WSB', 'U0BOTB', '1700000007.000800']]) {
    await forward(botUrl, { ...mention(standin, { run: `run-${team}`, channel: 'C0A', ts }), team, botUser });
  }
  assert.deepEqual(seen, [['T0WSA', 'U0BOTA', PLACEHOLDER_TOKEN], ['T0WSB', 'U0BOTB', PLACEHOLDER_TOKEN]]);
  assert.deepEqual(standin.apiCalls('auth.test'), [], 'no auth.test: the gateway named the workspace');
});

test('a forward without a valid run is handled with a warning, its calls named by no run', async (t) => {
  const warnings = [];
  const logger = {
    debug() {}, info() {}, error() {}, warn: (...msg) => warnings.push(msg.join(' ')),
    setLevel() {}, getLevel: () => LogLevel.WARN, setName() {},
  };
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ say, context }) => {
      await say(`identity: ${context.slackOnce}`);
    });
  }, { logger });
  for (const run of [undefined, 'not a run name!']) {
    const answer = await forward(botUrl, mention(standin, { run, channel: 'C0N', ts: '1700000007.000700', prefix: 'gw-n' }));
    assert.equal(answer.status, 200);
  }
  const posts = standin.apiCalls('chat.postMessage');
  assert.deepEqual(posts.map((c) => [c.prefix, c.headers['x-slack-once-request'], c.args.text]), [
    ['configured', undefined, 'identity: undefined'],
    ['configured', undefined, 'identity: undefined'],
  ]);
  assert.equal(warnings.filter((w) => w.includes('X-Slack-Once-Request')).length, 2);
});

test("Bolt's ignoreSelf skips the bot's own events with the botId and botUserId the app gives, when the forward names no bot user", async (t) => {
  const heard = [];
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('reaction_added', async ({ event }) => { heard.push(`reaction by ${event.user}`); });
    app.message(async ({ message }) => { heard.push(`message ${message.subtype} by ${message.bot_id}`); });
  });
  const envelope = (eventId, event) => JSON.stringify({
    token: 'unused', team_id: 'T0001', api_app_id: 'A0001', type: 'event_callback', event_id: eventId, event_time: 1700000000,
    // An event whose one authorization is a person's (an app with user scopes): it names no bot user.
    event, authorizations: [{ team_id: 'T0001', user_id: 'U0001', is_bot: false }],
  });
  // The bot's own reaction, and its own bot_message: Bolt with the app's botUserId and botId
  // (given to skip auth.test) ignores both.
  const own = [
    envelope('EvOwnReaction', { type: 'reaction_added', user: 'UBOT', reaction: 'eyes', item: { type: 'message', channel: 'C0R', ts: '1700000008.000100' }, event_ts: '1700000008.000200' }),
    envelope('EvOwnBotMessage', { type: 'message', subtype: 'bot_message', bot_id: 'B0BOT', text: 'deploy done', channel: 'C0R', ts: '1700000008.000300', event_ts: '1700000008.000300' }),
  ];
  for (const [n, body] of own.entries()) {
    const answer = await forward(botUrl, { body, contentType: JSON_TYPE, run: `run-self-${n}`, apiUrl: standin.apiUrl(), team: 'T0001' });
    assert.equal(answer.status, 200);
  }
  assert.deepEqual(heard, [], "the bot's own events reached its listeners");
});

test('an org-wide (Enterprise Grid) installation: the context names the enterprise, the workspace and the bot user, with no auth.test', async (t) => {
  const seen = [];
  const { standin, botUrl } = await setUp(t, (app) => {
    app.event('app_mention', async ({ context, client, event }) => {
      seen.push([context.enterpriseId, context.isEnterpriseInstall, context.teamId, context.botUserId]);
      await client.reactions.add({ channel: event.channel, timestamp: event.ts, name: 'eyes' });
    });
  });
  const body = JSON.stringify({
    token: 'unused', enterprise_id: 'E0ORG', team_id: 'T0WS', api_app_id: 'A0001', type: 'event_callback', event_id: 'EvOrgWide1', event_time: 1700000000,
    event: { type: 'app_mention', user: 'U0001', text: '<@UBOT> hello', ts: '1700000009.000100', channel: 'C0ORG', event_ts: '1700000009.000100' },
    authorizations: [{ enterprise_id: 'E0ORG', team_id: null, user_id: 'UBOT', is_bot: true, is_enterprise_install: true }],
    is_ext_shared_channel: false,
  });
  const answer = await forward(botUrl, { body, contentType: JSON_TYPE, run: 'run-org', apiUrl: standin.apiUrl(), team: 'T0WS', botUser: 'UBOT' });
  assert.equal(answer.status, 200);
  assert.deepEqual(seen, [['E0ORG', true, 'T0WS', 'UBOT']]);
  const [reaction] = standin.apiCalls('reactions.add');
  assert.equal(reaction.headers['x-slack-once-request'], 'run-org');
  assert.deepEqual(standin.apiCalls('auth.test'), []);
});
