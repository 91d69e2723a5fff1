-- 0002_installations: the installation store (src/workspaces/postgres.rs).

-- One row per app (its client id) and installation (`WORKSPACE#T…` or `ENTERPRISE#E…`).
-- `installation` is the installation as JSON; where a token seal is configured every token in
-- it is empty and `sealed` holds them (AES-256-GCM: the nonce, the text and its tag), with
-- `sealed_key` naming the key (a KMS-wrapped data key, or `key:ID` for a key the operator
-- gave). `row_version` counts the changes of `installation` and `sealed`: a change conditioned
-- on what it read is conditioned on it.
CREATE TABLE slack_once_installations (
    client text NOT NULL,
    scope text NOT NULL,
    installation text NOT NULL,
    sealed bytea,
    sealed_key bytea,
    seal integer,
    rotation text NOT NULL,
    installed_at bigint NOT NULL,
    app text,
    refresh_owner text,
    refresh_until bigint,
    broken text,
    revision bigint NOT NULL DEFAULT 0,
    row_version bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (client, scope)
);

-- OAuth states' nonces, each spent once (`spent_by`: the callback that spent it); deleted
-- after `expires_at` (epoch ms).
CREATE TABLE slack_once_oauth_states (
    client text NOT NULL,
    nonce text NOT NULL,
    spent_by text NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (client, nonce)
);
CREATE INDEX slack_once_oauth_states_expiry ON slack_once_oauth_states (expires_at);

-- History reads' pacing per app, workspace and method: the next read is free at `next_read`
-- (epoch ms); the row is deleted after `expires_at`.
CREATE TABLE slack_once_read_pace (
    client text NOT NULL,
    scope text NOT NULL,
    method text NOT NULL,
    next_read bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (client, scope, method)
);
CREATE INDEX slack_once_read_pace_expiry ON slack_once_read_pace (expires_at);
