-- 0001_ledger: the ledger (src/ledger/postgres/): claims with their journals, message aliases,
-- notes and the app's state. Every time is epoch milliseconds (bigint) on the database's clock
-- (leases, TTLs) or as the claimant wrote it (journal records, began windows, a note's order).
-- A row past its `expires_at` counts as absent until `PostgresLedger::delete_expired` deletes it.

-- One row per claimed key (Slack's event_id, a message's identity, an app-scoped key).
CREATE TABLE slack_once_claims (
    key text PRIMARY KEY,
    -- in_progress, done, released, failed (crate::ledger::Status::as_str).
    status text NOT NULL,
    -- The latest claim's owner token: only it journals a step or finishes the claim.
    owner text NOT NULL,
    lease_until bigint NOT NULL,
    expires_at bigint NOT NULL,
    -- The claims of the key so far, this one included.
    attempts integer NOT NULL,
    -- The Slack app (api_app_id) whose key it is; NULL: anyone's.
    app text,
    team_id text,
    retry_num integer,
    retry_reason text,
    -- A queued request with receives left: `sweep` leaves it to the queue for a while.
    redelivery boolean NOT NULL DEFAULT false,
    created_at bigint NOT NULL,
    claimed_at bigint NOT NULL,
    finished_at bigint,
    error text,
    retryable boolean NOT NULL DEFAULT false,
    -- A message's listeners that ran, as its completion recorded them.
    ran text[],
    -- Step number (as text) -> the step's record (StepRecord::encode).
    journal jsonb NOT NULL DEFAULT '{}',
    -- Step number (as text) -> a look-up's progress (Looked::encode).
    looked jsonb NOT NULL DEFAULT '{}',
    -- The began windows ("AT_MS LEASE_UNTIL_MS") of claims that have written nothing since.
    began jsonb NOT NULL DEFAULT '[]',
    -- State change id -> the version it wrote (crate::ledger::RequestChange).
    state_changes jsonb NOT NULL DEFAULT '{}',
    -- As DynamoDB's 400 KB item: a claim's journal and records stay bounded (ItemTooLarge).
    CONSTRAINT slack_once_claims_bounded CHECK (
        octet_length(journal::text) + octet_length(looked::text) + octet_length(began::text)
        + octet_length(state_changes::text) + coalesce(octet_length(array_to_string(ran, ' ')), 0)
        <= 409600)
);
CREATE INDEX slack_once_claims_expires_at ON slack_once_claims (expires_at);
CREATE INDEX slack_once_claims_lapsing ON slack_once_claims (lease_until)
    WHERE status = 'in_progress';

-- A message's alias (cmid-…): the key of the message it is an identity of.
CREATE TABLE slack_once_aliases (
    key text PRIMARY KEY,
    alias_of text NOT NULL,
    expires_at bigint NOT NULL,
    app text
);
CREATE INDEX slack_once_aliases_expires_at ON slack_once_aliases (expires_at);

-- Notes (actx-…, astop-…): a value, when its writer wrote it (its own clock) and its TTL.
CREATE TABLE slack_once_notes (
    key text PRIMARY KEY,
    value text NOT NULL,
    written_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    CONSTRAINT slack_once_notes_bounded CHECK (octet_length(value) <= 409600)
);
CREATE INDEX slack_once_notes_expires_at ON slack_once_notes (expires_at);

-- The app's state (state-APP-…): a versioned JSON value and its latest writers.
CREATE TABLE slack_once_state (
    key text PRIMARY KEY,
    value text NOT NULL,
    version bigint NOT NULL,
    writers text[] NOT NULL,
    expires_at bigint NOT NULL,
    CONSTRAINT slack_once_state_bounded CHECK (octet_length(value) <= 409600)
);
CREATE INDEX slack_once_state_expires_at ON slack_once_state (expires_at);
