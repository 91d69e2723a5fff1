import type { AppOptions, HTTPReceiverOptions } from '@slack/bolt';

export interface SlackOnceOptions {
  /**
   * The gateway's Web API proxy, ending with `/`; default `http://127.0.0.1:3000/api/`. Calls made
   * outside any request go here; a request's calls go to its own `X-Slack-Once-Api-Url`.
   */
  apiUrl?: string;
  /** The fetch that finally sends; default `globalThis.fetch`. */
  fetch?: typeof globalThis.fetch;
}

/** The forwarded request's identity, as `context.slackOnce` in every middleware and listener. */
export interface SlackOnceRequest {
  /** The request's identity, the same on every delivery, retry and takeover: an idempotency key for side effects outside Slack. */
  key: string;
  /** 1 on the request's first run; above 1 when this run takes over from one that did not finish. */
  attempt: number;
  /** Unix milliseconds at which this run's lease ends; a write after it is refused. */
  deadline: number;
  /** The run's name (`X-Slack-Once-Request`), sent back on every Web API call of the request. */
  request: string;
  /** The Web API proxy of the gateway that holds this run. */
  apiUrl: string;
}

/** Bolt's App options, less those the gateway takes over, plus the HTTP receiver's. */
export type GatewayAppOptions = Omit<
  AppOptions,
  | 'receiver' | 'socketMode' | 'appToken' | 'processBeforeResponse'
  | 'clientId' | 'clientSecret' | 'stateSecret' | 'redirectUri' | 'installationStore' | 'installerOptions' | 'scopes'
> &
  Pick<
    HTTPReceiverOptions,
    | 'customPropertiesExtractor' | 'dispatchErrorHandler' | 'processEventErrorHandler'
    | 'unhandledRequestHandler' | 'unhandledRequestTimeoutMillis' | 'bodyLimit'
  >;

export type WebClientOptions = NonNullable<AppOptions['clientOptions']>;

export interface SlackOnce {
  /**
   * The App's options behind the gateway: an HTTP receiver whose processing of each request runs
   * in that request's run (with `processBeforeResponse`, and `context.slackOnce`), and client
   * options whose calls name the run.
   */
  appOptions(options: GatewayAppOptions): AppOptions;
  /** Options for a WebClient of your own whose calls, made while a request is handled, name its run. */
  clientOptions(options?: WebClientOptions): WebClientOptions;
}

export function slackOnce(options?: SlackOnceOptions): SlackOnce;

declare module '@slack/bolt/dist/types/middleware' {
  interface Context {
    /** Set on every request the gateway forwarded (undefined on a request without a valid run). */
    slackOnce?: SlackOnceRequest;
  }
}
