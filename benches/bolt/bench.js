// The Bolt for JavaScript baseline of slack-once's benchmarks: the same app_mention answered in
// its thread through the same Slack stand-in, with Bolt's AwsLambdaReceiver driven in-process.
//
//   node bench.js cold        handle one event, then print {"answered": true}
//   node bench.js warm N      handle N sequential events; print latency percentiles and RSS
//
// Environment: SLACK_API_URL (the stand-in, e.g. http://127.0.0.1:PORT/api/), SECRET.
// Bolt is given its bot ids so that it makes no auth.test call: its best case. Every event
// carries its own event_id, ts and client_msg_id, as a person's message does; Bolt for
// JavaScript has no idempotency of its own, so it answers every copy.
'use strict';
const startedNs = process.hrtime.bigint();
const crypto = require('crypto');
const { App, AwsLambdaReceiver, LogLevel } = require('@slack/bolt');

const secret = process.env.SECRET || 'bench-secret';
const receiver = new AwsLambdaReceiver({ signingSecret: secret, logLevel: LogLevel.ERROR });
const app = new App({
  token: 'xoxb-bench',
  botId: 'B0BENCH',
  botUserId: 'UBOT',
  tokenVerificationEnabled: false,
  receiver,
  processBeforeResponse: true, // on Lambda the reply must be posted before the response
  logLevel: LogLevel.ERROR,
  clientOptions: { slackApiUrl: process.env.SLACK_API_URL, retryConfig: { retries: 0 } },
});

app.event('app_mention', async ({ event, say }) => {
  await say({ text: `<@${event.user}> you said it. This is my one answer to it.`, thread_ts: event.thread_ts || event.ts });
});

let seq = 0;
function lambdaEvent(eventId) {
  // Each event its own message, as a person's: its own ts and client_msg_id.
  seq += 1;
  const ts = `${1700000000 + seq}.${String(process.pid % 1000000).padStart(6, '0')}`;
  const body = JSON.stringify({
    token: 'unused', team_id: 'T0001', api_app_id: 'A0001', type: 'event_callback',
    event_id: eventId, event_time: 1700000000,
    event: { type: 'app_mention', user: 'U0001', text: '<@UBOT> benchmark', ts, channel: 'C0001', event_ts: ts, client_msg_id: crypto.randomUUID() },
    authorizations: [{ team_id: 'T0001', user_id: 'UBOT', is_bot: true }],
  });
  const now = Math.floor(Date.now() / 1000);
  const sig = 'v0=' + crypto.createHmac('sha256', secret).update(`v0:${now}:${body}`).digest('hex');
  return {
    version: '2.0', routeKey: '$default', rawPath: '/slack/events', rawQueryString: '',
    headers: { 'content-type': 'application/json', 'x-slack-request-timestamp': String(now), 'x-slack-signature': sig },
    requestContext: { http: { method: 'POST', path: '/slack/events' } },
    body, isBase64Encoded: false,
  };
}

async function main() {
  const handler = await receiver.start();
  const context = { getRemainingTimeInMillis: () => 10000 };
  const [mode, n] = [process.argv[2] || 'cold', Number(process.argv[3] || 2000)];
  if (mode === 'cold') {
    const res = await handler(lambdaEvent('EvBoltCold'), context, () => {});
    const ms = Number(process.hrtime.bigint() - startedNs) / 1e6;
    console.log(JSON.stringify({ answered: res.statusCode === 200, in_process_ms: ms }));
    process.exit(0);
  }
  const idleRss = process.memoryUsage().rss;
  const lat = [];
  for (let i = 0; i < n; i++) {
    const ev = lambdaEvent(`EvBoltWarm${i}`);
    const t0 = process.hrtime.bigint();
    const res = await handler(ev, context, () => {});
    lat.push(Number(process.hrtime.bigint() - t0) / 1e3);
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
  }
  lat.sort((a, b) => a - b);
  const pct = (p) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))];
  console.log(JSON.stringify({ n, p50_us: pct(50), p99_us: pct(99), idle_rss: idleRss, peak_rss: process.resourceUsage().maxRSS * 1024 }));
  process.exit(0);
}
main().catch((e) => { console.error(e); process.exit(1); });
