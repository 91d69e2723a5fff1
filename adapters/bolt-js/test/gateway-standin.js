'use strict';
// A small real HTTP server in the gateway's part: it signs and forwards requests to the bot with the
// protocol's headers (docs/gateway-protocol.md), and it serves the Web API proxy, recording every
// call the bot makes and answering Slack-shaped JSON.
const crypto = require('node:crypto');
const http = require('node:http');

const PLACEHOLDER_TOKEN = 'xoxb-slack-once-placeholder';
const GATEWAY_SECRET = 'gateway-secret-for-tests';

/** Slack's answers to the methods the tests call; any other method answers `{"ok": true}`. */
function slackAnswer(method, args) {
  switch (method) {
    case 'auth.test':
      return { ok: true, team_id: 'T0001', user_id: 'UBOT', bot_id: 'B0BOT' };
    case 'chat.postMessage': {
      const ts = `${Math.floor(Date.now() / 1000)}.${String(crypto.randomInt(1e6)).padStart(6, '0')}`;
      return { ok: true, channel: args.channel, ts, message: { type: 'message', text: args.text, user: 'UBOT', ts } };
    }
    case 'views.open':
      return { ok: true, view: { id: 'V0001', callback_id: JSON.parse(args.view).callback_id } };
    case 'conversations.info':
      return { ok: true, channel: { id: args.channel } };
    default:
      return { ok: true };
  }
}

class GatewayStandin {
  constructor() {
    /** Every request that reached the server: { path, prefix, method, headers, args, at }. */
    this.calls = [];
    /** method -> async (call) => { status, headers, body } | object: overrides slackAnswer. */
    this.answers = new Map();
    this.server = http.createServer((req, res) => this.serve(req, res));
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.base = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  async stop() {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** The Web API proxy's base URL under a path prefix, so that tests can tell two gateways apart. */
  apiUrl(prefix = 'gw') {
    return `${this.base}/${prefix}/api/`;
  }

  async serve(req, res) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const raw = Buffer.concat(chunks).toString('utf8');
    const { pathname, searchParams } = new URL(req.url, this.base);
    const match = /^\/([^/]+)\/api\/(.+)$/.exec(pathname);
    const call = {
      path: pathname,
      prefix: match ? match[1] : undefined,
      method: match ? match[2] : undefined,
      headers: req.headers,
      args: { ...Object.fromEntries(searchParams), ...parseBody(req.headers['content-type'], raw) },
      raw,
      at: performance.now(),
    };
    this.calls.push(call);
    const override = this.answers.get(call.method);
    const answer = override ? await override(call) : { body: slackAnswer(call.method, call.args) };
    res.writeHead(answer.status ?? 200, { 'content-type': 'application/json', ...answer.headers });
    res.end(JSON.stringify(answer.body));
  }

  /** Web API calls (not to be confused with other requests that reached the server). */
  apiCalls(method) {
    return this.calls.filter((c) => c.method !== undefined && (method === undefined || c.method === method));
  }
}

function parseBody(contentType = '', raw) {
  if (raw === '') return {};
  if (contentType.startsWith('application/json')) return JSON.parse(raw);
  return Object.fromEntries(new URLSearchParams(raw));
}

/**
 * POSTs `body` to the bot as the gateway forwards it: re-signed with `secret` and a fresh
 * timestamp, with the run's headers. Resolves when the bot's answer has been read.
 */
async function forward(botUrl, { body, contentType, run, apiUrl, key = `key-${run}`, attempt = 1, deadline = Date.now() + 60_000, secret = GATEWAY_SECRET, headersSecret = secret, team, botUser }) {
  const timestamp = String(Math.floor(Date.now() / 1000));
  const sign = (key, signed) => `v0=${crypto.createHmac('sha256', key).update(`v0:${timestamp}:${signed}`).digest('hex')}`;
  const signature = sign(secret, body);
  const headers = {
    'content-type': contentType,
    'x-slack-request-timestamp': timestamp,
    'x-slack-signature': signature,
    'x-slack-once-request': run,
    'x-slack-once-api-url': apiUrl,
    'x-slack-once-key': key,
    'x-slack-once-attempt': String(attempt),
    'x-slack-once-deadline': String(deadline),
    'x-slack-once-team': team,
    'x-slack-once-bot-user': botUser,
    // The run and the address, signed as the gateway signs them.
    'x-slack-once-signature': run !== undefined && apiUrl !== undefined ? sign(headersSecret, `${run}:${apiUrl}`) : undefined,
  };
  for (const [name, value] of Object.entries(headers)) if (value === undefined) delete headers[name];
  const response = await fetch(botUrl, { method: 'POST', headers, body });
  const text = await response.text();
  return { status: response.status, text, at: performance.now() };
}

/** An Events API envelope of an app_mention, as Slack sends it. */
function mentionEnvelope({ channel, ts, eventId = `Ev${ts.replace('.', '')}` }) {
  return JSON.stringify({
    token: 'unused', team_id: 'T0001', api_app_id: 'A0001', type: 'event_callback', event_id: eventId, event_time: 1700000000,
    event: { type: 'app_mention', user: 'U0001', text: '<@UBOT> hello', ts, channel, event_ts: ts },
    authorizations: [{ team_id: 'T0001', user_id: 'UBOT', is_bot: true }],
  });
}

/** A slash command's form body, as Slack sends it. */
function commandForm({ command = '/ticket', text, responseUrl, triggerId = '1.2.abc' }) {
  return new URLSearchParams({
    token: 'unused', team_id: 'T0001', team_domain: 'acme', channel_id: 'C0001', channel_name: 'general',
    user_id: 'U0001', user_name: 'ada', command, text, api_app_id: 'A0001', response_url: responseUrl, trigger_id: triggerId,
  }).toString();
}

module.exports = { GatewayStandin, forward, mentionEnvelope, commandForm, PLACEHOLDER_TOKEN, GATEWAY_SECRET };
