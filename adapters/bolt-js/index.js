'use strict';
// A Bolt for JavaScript app behind the slack-once gateway. The contract this follows is
// docs/gateway-protocol.md in the slack-once repository.
const { AsyncLocalStorage } = require('node:async_hooks');
const { createHmac, timingSafeEqual } = require('node:crypto');
const { HTTPReceiver, webApi } = require('@slack/bolt');

const DEFAULT_API_URL = 'http://127.0.0.1:3000/api/';
/** The protocol's run name: at most 64 characters of `[A-Za-z0-9-]`. */
const RUN_NAME = /^[A-Za-z0-9-]{1,64}$/;

/**
 * Builds the App options that put a Bolt app behind the gateway: every Web API call made while a
 * forwarded request is handled goes to that request's gateway and names its run; `respond()` goes
 * through the gateway too; the HTTP answer is sent when the listeners have ended.
 */
function slackOnce({ apiUrl = DEFAULT_API_URL, fetch: baseFetch = globalThis.fetch } = {}) {
  const configuredApiUrl = withTrailingSlash(apiUrl);
  const runs = new AsyncLocalStorage();
  // The placeholder token, once appOptions has it: every call to the gateway carries it.
  const placeholder = { token: undefined };
  const fetch = gatewayFetch(runs, configuredApiUrl, baseFetch, placeholder);

  function clientOptions(options = {}) {
    return {
      ...options,
      slackApiUrl: configuredApiUrl,
      fetch,
      // A queued call would start later in the async context of whichever call freed its slot
      // (web-api 8 queues calls in p-queue): another request's run. No cap and no rate-limit pause
      // of the queue mean no call is ever queued, so each starts in its caller's context. The
      // gateway waits out Slack's 429 on a journaled write itself, within the run's deadline.
      maxRequestConcurrency: Infinity,
      rejectRateLimitedCalls: true,
    };
  }

  function appOptions(options = {}) {
    if (options.receiver !== undefined || options.socketMode) {
      throw new Error(
        'slack-once: the gateway forwards requests over HTTP; give appOptions the HTTP options and no receiver or socketMode',
      );
    }
    for (const key of ['clientId', 'clientSecret', 'stateSecret', 'redirectUri', 'installationStore', 'installerOptions', 'scopes']) {
      if (options[key] !== undefined) {
        throw new Error(
          `slack-once: the gateway holds the workspaces' tokens and does OAuth; remove the app's ${key} and give it the gateway's placeholder token`,
        );
      }
    }
    const {
      signingSecret, endpoints, port, customRoutes, signatureVerification, customPropertiesExtractor,
      dispatchErrorHandler, processEventErrorHandler, unhandledRequestHandler, unhandledRequestTimeoutMillis,
      bodyLimit, token, botId, botUserId, ...rest
    } = options;
    if (token !== undefined && rest.authorize !== undefined) {
      throw new Error('slack-once: give appOptions the token or an authorize function, not both');
    }
    if (token !== undefined) {
      // The gateway says which workspace and bot user each request is for: Bolt's single-token
      // authorization would ask auth.test, once, outside any request, and take its answer for
      // every workspace.
      placeholder.token = token;
      rest.authorize = async (source) => {
        const run = runs.getStore();
        // The app's own botId and botUserId (Bolt's options that skip auth.test) where the
        // forward names no bot user: Bolt's ignoreSelf needs them to skip the bot's own events.
        return {
          botToken: token,
          botId,
          botUserId: run?.botUser ?? botUserId,
          teamId: run?.team ?? source.teamId,
          enterpriseId: source.enterpriseId,
        };
      };
    }
    if (!signingSecret && signatureVerification !== false) {
      throw new Error("slack-once: signingSecret is required: the gateway's SLACK_ONCE_GATEWAY_SECRET");
    }
    const receiver = new GatewayReceiver(runs, {
      signingSecret, endpoints, port, customRoutes, signatureVerification,
      dispatchErrorHandler, processEventErrorHandler, unhandledRequestHandler, unhandledRequestTimeoutMillis, bodyLimit,
      logger: options.logger,
      logLevel: options.logLevel,
      processBeforeResponse: true,
      customPropertiesExtractor: (req) => ({
        ...(customPropertiesExtractor ? customPropertiesExtractor(req) : {}),
        slackOnce: requestIdentity(req.headers, configuredApiUrl, signingSecret),
      }),
    }, placeholder);
    return { ...rest, receiver, processBeforeResponse: true, clientOptions: clientOptions(options.clientOptions) };
  }

  return { appOptions, clientOptions };
}

/**
 * Bolt's HTTPReceiver that runs each request's processing (authorize, middleware, listeners, the
 * error handler) inside the request's run, so that the Web API calls it makes name it.
 */
class GatewayReceiver extends HTTPReceiver {
  constructor(runs, options, placeholder) {
    super(options);
    this.slackOnceRuns = runs;
    this.slackOnceLogger = options.logger;
    this.slackOncePlaceholder = placeholder;
  }

  get slackOnceToken() {
    return this.slackOncePlaceholder.token;
  }

  init(app) {
    const { slackOnceRuns: runs, slackOnceToken: token } = this;
    const logger = this.slackOnceLogger ?? app.logger;
    super.init({
      processEvent(event) {
        const identity = event.customProperties.slackOnce;
        if (identity === FORGED) {
          // A forward replayed with an address of its own: the calls would take the token there.
          logger.error('slack-once: refused a forward whose X-Slack-Once-Signature does not sign its run and address');
          throw new Error('slack-once: the forward is not signed by the gateway');
        }
        if (identity === undefined) {
          logger.warn('slack-once: a request without a valid X-Slack-Once-Request: its Web API calls are not journaled');
          return app.processEvent(event);
        }
        const run = { ...identity, token, responseUrls: responseUrlsOf(event.body) };
        return runs.run(run, () => app.processEvent(event));
      },
    });
  }
}

/** What `requestIdentity` gives for a run and address that the gateway did not sign. */
const FORGED = Symbol('slack-once: forged');

/**
 * The forwarded request's identity, from the protocol's headers; undefined without a valid run;
 * FORGED when `X-Slack-Once-Signature` does not sign the run and the address.
 */
function requestIdentity(headers, configuredApiUrl, signingSecret) {
  const request = headers['x-slack-once-request'];
  if (typeof request !== 'string' || !RUN_NAME.test(request)) return undefined;
  const apiUrl = headers['x-slack-once-api-url'];
  if (typeof apiUrl === 'string' && apiUrl !== '' && !signed(headers, request, apiUrl, signingSecret)) {
    return FORGED;
  }
  return {
    key: headers['x-slack-once-key'],
    attempt: Number(headers['x-slack-once-attempt'] ?? 1),
    deadline: Number(headers['x-slack-once-deadline']),
    team: headerValue(headers['x-slack-once-team']),
    botUser: headerValue(headers['x-slack-once-bot-user']),
    request,
    apiUrl: typeof apiUrl === 'string' && apiUrl !== '' ? withTrailingSlash(apiUrl) : configuredApiUrl,
  };
}

/**
 * Whether `X-Slack-Once-Signature` is `v0=` and the hex HMAC-SHA256 of
 * `v0:{timestamp}:{run}:{api-url}` under the signing secret (the timestamp Bolt verified).
 */
function signed(headers, run, apiUrl, signingSecret) {
  const given = headers['x-slack-once-signature'];
  const timestamp = headers['x-slack-request-timestamp'];
  if (!signingSecret || typeof given !== 'string' || typeof timestamp !== 'string') return false;
  const expected = `v0=${createHmac('sha256', signingSecret).update(`v0:${timestamp}:${run}:${apiUrl}`).digest('hex')}`;
  return given.length === expected.length && timingSafeEqual(Buffer.from(given), Buffer.from(expected));
}

/** Where Bolt's respond() posts: a command's, a click's, or a submission's first response_url. */
function responseUrlsOf(body) {
  const urls = [];
  if (body && typeof body.response_url === 'string') urls.push(body.response_url);
  if (body && Array.isArray(body.response_urls)) {
    for (const entry of body.response_urls) if (entry && typeof entry.response_url === 'string') urls.push(entry.response_url);
  }
  return urls;
}

/**
 * The `fetch` given to web-api's WebClient and to Bolt's respond(). Inside a run, a Web API call
 * goes to the run's gateway with `X-Slack-Once-Request`, and a post to the request's
 * response_url becomes `POST {api-url}respond`. Anything else passes as it is.
 */
function gatewayFetch(runs, configuredApiUrl, baseFetch, placeholder) {
  return async function slackOnceFetch(resource, init = {}) {
    const run = runs.getStore();
    const url = typeof resource === 'string' ? resource : String(resource.href ?? resource.url);
    if (!url.startsWith(configuredApiUrl) && (run === undefined || !run.responseUrls.includes(url))) {
      return baseFetch(resource, init);
    }
    const headers = new Headers(init.headers);
    // app.client has no token of its own when Bolt authorizes each request: its calls (a
    // scheduled job's) carry the placeholder as every other call does.
    if (!headers.has('Authorization') && placeholder.token) headers.set('Authorization', `Bearer ${placeholder.token}`);
    if (run === undefined) return baseFetch(resource, { ...init, headers });
    if (run.responseUrls.includes(url)) return respond(run, { ...init, headers }, baseFetch);
    headers.set('X-Slack-Once-Request', run.request);
    return baseFetch(run.apiUrl + url.slice(configuredApiUrl.length), { ...init, headers });
  };
}

/**
 * respond() through the gateway, which posts the body to the request's own response_url as a
 * journaled step. The gateway's own errors come back as HTTP 200 `{"ok": false, ...}`; they are
 * raised as web-api's platform error, as a Web API call's would be.
 */
async function respond(run, init, baseFetch) {
  const headers = new Headers(init.headers);
  headers.set('X-Slack-Once-Request', run.request);
  if (run.token && !headers.has('Authorization')) headers.set('Authorization', `Bearer ${run.token}`);
  const response = await baseFetch(`${run.apiUrl}respond`, { ...init, method: 'POST', headers, redirect: 'error' });
  if (response.status !== 200) return response;
  const text = await response.text();
  let result;
  try {
    result = JSON.parse(text);
  } catch {
    result = undefined;
  }
  if (result && result.ok === false) throw new webApi.WebAPIPlatformError(result);
  return new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers });
}

function headerValue(value) {
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function withTrailingSlash(url) {
  return url.endsWith('/') ? url : `${url}/`;
}

module.exports = { slackOnce };
