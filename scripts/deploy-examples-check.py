#!/usr/bin/env python3
"""Checks the example Socket Mode deployments in deploy/ offline: nothing is deployed, nothing
is fetched.

What it asserts (each line of its output names one check):

  k8s-schema         each manifest in deploy/kubernetes/ validates against the official JSON schema
                     of its kind (Kubernetes v1.31.0's OpenAPI, strict: an unknown or misspelt field
                     fails), vendored in deploy/schemas/; a kind with no schema there fails
  ecs-schema         deploy/ecs/task-definition.json and service.json are valid input of
                     `aws ecs register-task-definition` and `aws ecs create-service`
                     (--cli-input-json): botocore's own ParamValidator on the ecs service model's
                     RegisterTaskDefinition and CreateService shapes, as the CLI validates them
  env                every replica has the same configuration: SLACK_APP_TOKEN, SLACK_BOT_TOKEN,
                     DEDUP_TABLE (without it each replica would hold its own ledger in memory and
                     answer a redelivered event again), SLACK_SOCKET_CONNECTIONS (1-10) and
                     LISTEN_ADDR; no SLACK_SIGNING_SECRET (Socket Mode needs none)
  connections        Slack allows an app 10 Socket Mode connections, every process's together:
                     (replicas + the rolling update's surge) x SLACK_SOCKET_CONNECTIONS <= 8, leaving
                     2 for the replacements that open before a recycled connection closes; and with
                     one more replica still draining (Kubernetes does not count a terminating pod
                     against maxSurge) <= 10. Kubernetes' maxSurge as a percentage rounds up;
                     ECS's maximumPercent rounds down
  rollout            an update never leaves fewer ready replicas than wanted and can proceed:
                     Kubernetes RollingUpdate with maxUnavailable 0 and maxSurge >= 1; ECS
                     minimumHealthyPercent 100, a maximumPercent with room for one more task, the
                     ECS deployment controller and the deployment circuit breaker on (with rollback)
  readiness          Kubernetes: readinessProbe GET /readyz and livenessProbe GET /healthz (never
                     /readyz: Slack unreachable is no reason to restart), on LISTEN_ADDR's port,
                     which listens on every interface (the kubelet probes from outside the
                     container's loopback); ECS: the container's healthCheck requests /readyz on
                     LISTEN_ADDR's port, with the image's /bin/wget, its timings within ECS's ranges
  grace              the time between SIGTERM and SIGKILL (terminationGracePeriodSeconds, ECS
                     stopTimeout, at most Fargate's 120) covers the drain (10 s, then 1 s for the
                     connections to close), the work in flight (DEDUP_LEASE_SECONDS, 30 s by
                     default) and the answers' last 2 s: at least 43 s by default
  tokens             the tokens come from a Secret (secretKeyRef) or Secrets Manager (`secrets`,
                     valueFrom an ARN), never a `value`; no string anywhere in deploy/ looks like a
                     Slack token (xapp-, xoxb-, xoxp-, ...) other than the placeholders
  secret-shape       the Deployment's secretKeyRefs name the Secret in secret.example.yaml and keys
                     it has; the example Secret holds exactly those keys
  hardening          non-root (runAsNonRoot, a non-zero uid; ECS `user`), read-only root filesystem,
                     no privilege escalation, every capability dropped, memory requested and limited
                     (Kubernetes) or sized (Fargate)
  disruption-budget  the PodDisruptionBudget (policy/v1) selects the Deployment's pods and lets
                     exactly one of them go at a time (minAvailable replicas - 1, or maxUnavailable 1)
  fargate            the task definition is Fargate's (FARGATE, awsvpc, a valid cpu/memory pair,
                     one essential container) and the service runs it (its family, launchType
                     FARGATE, an awsvpc network configuration without a public IP)
  image              deploy/container/Dockerfile's final stage is FROM scratch with a numeric
                     non-root USER that the Kubernetes and ECS examples run as, ENTRYPOINT the
                     binary, and the /bin/wget the ECS health check runs

With --self-test it then breaks the examples in memory in the ways each check exists for and
confirms that the check fails.

Usage: .tools/sam/bin/python scripts/deploy-examples-check.py [--deploy DIR] [--self-test] [-q]
(any Python with jsonschema >= 4.18, PyYAML and botocore: the .tools/sam environment from
scripts/tools.sh sam has them). Exit status: 0 when every check passes, 1 when one fails, 2 when
an example cannot be read.
"""

import argparse
import copy
import json
import math
import re
import sys
from pathlib import Path

try:
    import yaml
    from botocore.exceptions import ParamValidationError
    from botocore.session import get_session
    from botocore.validate import ParamValidator
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
except ImportError as e:  # pragma: no cover
    sys.exit(f"deploy-examples-check: {e}: run it with .tools/sam/bin/python (scripts/tools.sh sam installs it)")

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = "schemas/kubernetes-v1.31.0-local-strict"
# apiVersion and kind -> the vendored schema's file (its name as kubernetes-json-schema names it).
K8S_SCHEMA_FILES = {
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1.json",
    ("v1", "Secret"): "secret-v1.json",
}

# Slack: "Apps can have up to 10 open WebSocket connections at the same time" (every process's).
SLACK_CONNECTIONS_LIMIT = 10
# Room kept for the replacements a process opens before a recycled connection closes.
RECYCLE_ROOM = 2
# src/socket_mode/mod.rs DRAIN (10 s) + the 1 s its wait adds; src/server.rs SHUTDOWN_GRACE (2 s).
DRAIN_SECONDS, DRAIN_CLOSE_SECONDS, SHUTDOWN_GRACE_SECONDS = 10, 1, 2
DEFAULT_LEASE_SECONDS = 30  # DEDUP_LEASE_SECONDS' default (docs/configuration.md)
FARGATE_MAX_STOP_TIMEOUT = 120
# ECS's container health check: each field's allowed range and default (HealthCheck, ECS API reference).
ECS_HEALTH_CHECK_RANGES = {"interval": (5, 300, 30), "timeout": (2, 60, 5), "retries": (1, 10, 3), "startPeriod": (0, 300, 0)}
# Fargate's task sizes (cpu units -> memory MiB allowed), the small ones this bot could use.
FARGATE_SIZES = {"256": {512, 1024, 2048}, "512": set(range(1024, 4097, 1024)),
                 "1024": set(range(2048, 8193, 1024)), "2048": set(range(4096, 16385, 1024))}
REQUIRED_ENV = ["SLACK_APP_TOKEN", "SLACK_BOT_TOKEN", "DEDUP_TABLE", "SLACK_SOCKET_CONNECTIONS", "LISTEN_ADDR"]
TOKEN_VARIABLES = ["SLACK_APP_TOKEN", "SLACK_BOT_TOKEN"]
# Slack's token prefixes: app-level, bot, user, workspace/org, refresh, configuration.
TOKEN_PATTERN = re.compile(r"\b(?:xapp|xox[abposer])-[A-Za-z0-9][A-Za-z0-9-]*")
PLACEHOLDERS = {"xapp-REPLACE-ME", "xoxb-REPLACE-ME"}
SECRETS_MANAGER_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+")


class CheckFailed(Exception):
    pass


def require(condition, message):
    if not condition:
        raise CheckFailed(message)


# ---------------------------------------------------------------------------------------------
# Reading the examples


class Examples:
    """Everything under deploy/ the checks read, parsed; the self-test mutates copies of it."""

    def __init__(self, deploy):
        self.deploy = Path(deploy)
        self.manifests = []  # (file name, document)
        for path in sorted((self.deploy / "kubernetes").glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text()):
                if document is not None:
                    self.manifests.append((path.name, document))
        self.task_definition = json.loads((self.deploy / "ecs" / "task-definition.json").read_text())
        self.service = json.loads((self.deploy / "ecs" / "service.json").read_text())
        self.dockerfile = (self.deploy / "container" / "Dockerfile").read_text()
        # Every other text file (READMEs, comments' worth of prose), for the token scan.
        self.texts = {}
        for path in sorted(self.deploy.rglob("*")):
            relative = path.relative_to(self.deploy).as_posix()
            if path.is_file() and not relative.startswith("schemas/") and path.suffix in {".md", ".yaml", ".json", ".txt", ""}:
                self.texts[relative] = path.read_text()

    def kind(self, kind):
        found = [d for _, d in self.manifests if d.get("kind") == kind]
        require(len(found) == 1, f"want one {kind} in deploy/kubernetes/, found {len(found)}")
        return found[0]

    def container(self):
        containers = self.kind("Deployment")["spec"]["template"]["spec"]["containers"]
        require(len(containers) == 1, f"want one container in the Deployment, found {len(containers)}")
        return containers[0]

    def ecs_container(self):
        containers = self.task_definition.get("containerDefinitions") or []
        require(len(containers) == 1, f"want one container in the task definition, found {len(containers)}")
        return containers[0]


def k8s_env(container):
    """name -> the env entry (its `value` or `valueFrom`)."""
    return {e["name"]: e for e in container.get("env", [])}


def ecs_env(container):
    """name -> ("value", text) or ("secret", valueFrom)."""
    env = {e["name"]: ("value", e.get("value")) for e in container.get("environment", [])}
    for s in container.get("secrets", []):
        env[s["name"]] = ("secret", s.get("valueFrom"))
    return env


def plain(entry):
    """A Kubernetes env entry's literal value, None when it comes from elsewhere."""
    return entry.get("value") if "valueFrom" not in entry else None


def connections_of(value, where):
    require(value is not None, f"{where}: SLACK_SOCKET_CONNECTIONS is not set (the default, 2, should be explicit)")
    require(re.fullmatch(r"[0-9]+", str(value)) and 1 <= int(value) <= SLACK_CONNECTIONS_LIMIT,
            f"{where}: SLACK_SOCKET_CONNECTIONS={value!r} is not 1-10")
    return int(value)


def listen_port(value, where):
    match = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[0-9.]+):([0-9]+)", str(value or ""))
    require(match, f"{where}: LISTEN_ADDR={value!r} is not HOST:PORT")
    return match.group(1), int(match.group(2))


def lease_seconds(value):
    return int(value) if value is not None else DEFAULT_LEASE_SECONDS


def needed_grace(lease):
    return DRAIN_SECONDS + DRAIN_CLOSE_SECONDS + lease + SHUTDOWN_GRACE_SECONDS


def surge_of(max_surge, replicas):
    """Kubernetes' maxSurge in pods: a percentage rounds up."""
    if isinstance(max_surge, str):
        require(re.fullmatch(r"[0-9]+%", max_surge), f"maxSurge {max_surge!r} is neither a count nor a percentage")
        return math.ceil(replicas * int(max_surge[:-1]) / 100)
    return int(max_surge)


def unavailable_of(max_unavailable, replicas):
    """Kubernetes' maxUnavailable in pods: a percentage rounds down."""
    if isinstance(max_unavailable, str):
        require(re.fullmatch(r"[0-9]+%", max_unavailable), f"maxUnavailable {max_unavailable!r} is neither a count nor a percentage")
        return math.floor(replicas * int(max_unavailable[:-1]) / 100)
    return int(max_unavailable)


def budget(where, steady, surge, connections):
    peak = (steady + surge) * connections
    require(peak <= SLACK_CONNECTIONS_LIMIT - RECYCLE_ROOM,
            f"{where}: ({steady} + {surge} surge) x {connections} connections = {peak} > "
            f"{SLACK_CONNECTIONS_LIMIT - RECYCLE_ROOM} (Slack's {SLACK_CONNECTIONS_LIMIT} less {RECYCLE_ROOM} "
            "for recycled connections' replacements)")
    draining = (steady + surge + 1) * connections
    require(draining <= SLACK_CONNECTIONS_LIMIT,
            f"{where}: with one replica draining, ({steady} + {surge} surge + 1) x {connections} = {draining} > {SLACK_CONNECTIONS_LIMIT}")
    return f"{where} {steady}+{surge} x {connections} = {peak}, {draining} with one draining"


def strings(value):
    """Every string inside a parsed document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


# ---------------------------------------------------------------------------------------------
# The checks


class Checks:
    def __init__(self, examples, schemas):
        self.x = examples
        self.schemas = schemas  # (registry, {file name: schema})

    def k8s_schema(self):
        registry, by_file = self.schemas
        require(self.x.manifests, "no manifest in deploy/kubernetes/")
        checked = []
        for name, document in self.x.manifests:
            key = (document.get("apiVersion"), document.get("kind"))
            require(key in K8S_SCHEMA_FILES, f"{name}: no schema vendored for apiVersion {key[0]!r} kind {key[1]!r}")
            validator = Draft202012Validator(by_file[K8S_SCHEMA_FILES[key]], registry=registry)
            errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
            require(not errors, f"{name}: " + "; ".join(
                f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message[:160]}" for e in errors[:3]))
            checked.append(f"{name} {key[1]}")
        return ", ".join(checked)

    def ecs_schema(self):
        model = get_session().get_service_model("ecs")
        validator = ParamValidator()
        for operation, document, name in (("RegisterTaskDefinition", self.x.task_definition, "task-definition.json"),
                                          ("CreateService", self.x.service, "service.json")):
            report = validator.validate(document, model.operation_model(operation).input_shape)
            if report.has_errors():
                raise CheckFailed(f"{name} as {operation} input: {ParamValidationError(report=report.generate_report())}")
        return "RegisterTaskDefinition, CreateService"

    def env(self):
        k8s, ecs = k8s_env(self.x.container()), ecs_env(self.x.ecs_container())
        for where, env in (("Kubernetes", k8s), ("ECS", ecs)):
            missing = [n for n in REQUIRED_ENV if n not in env]
            require(not missing, f"{where}: {', '.join(missing)} not set")
            require("SLACK_SIGNING_SECRET" not in env, f"{where}: SLACK_SIGNING_SECRET set (Socket Mode needs none)")
        k8s_plain = {n: plain(e) for n, e in k8s.items() if plain(e) is not None}
        ecs_plain = {n: v for n, (how, v) in ecs.items() if how == "value"}
        require(k8s_plain.get("DEDUP_TABLE"), "Kubernetes: DEDUP_TABLE is empty")
        require(ecs_plain.get("DEDUP_TABLE"), "ECS: DEDUP_TABLE is empty")
        for name in ("DEDUP_TABLE", "SLACK_SOCKET_CONNECTIONS", "DEDUP_LEASE_SECONDS"):
            require(k8s_plain.get(name) == ecs_plain.get(name),
                    f"{name} differs: Kubernetes {k8s_plain.get(name)!r}, ECS {ecs_plain.get(name)!r}")
        connections_of(k8s_plain.get("SLACK_SOCKET_CONNECTIONS"), "Kubernetes")
        return f"{', '.join(REQUIRED_ENV)} on both"

    def connections(self):
        deployment = self.x.kind("Deployment")["spec"]
        replicas = deployment.get("replicas", 1)
        rolling = deployment.get("strategy", {}).get("rollingUpdate", {})
        k8s = budget("Kubernetes", replicas, surge_of(rolling.get("maxSurge", "25%"), replicas),
                     connections_of(plain(k8s_env(self.x.container()).get("SLACK_SOCKET_CONNECTIONS", {})), "Kubernetes"))
        desired = self.x.service.get("desiredCount", 0)
        dc = self.x.service.get("deploymentConfiguration", {})
        most = math.floor(desired * dc.get("maximumPercent", 200) / 100)
        ecs_value = ecs_env(self.x.ecs_container()).get("SLACK_SOCKET_CONNECTIONS", ("value", None))
        require(ecs_value[0] == "value", "ECS: SLACK_SOCKET_CONNECTIONS is not a plain value")
        ecs = budget("ECS", desired, max(most - desired, 0), connections_of(ecs_value[1], "ECS"))
        return f"{k8s}; {ecs}"

    def rollout(self):
        deployment = self.x.kind("Deployment")["spec"]
        replicas = deployment.get("replicas", 1)
        strategy = deployment.get("strategy", {})
        require(strategy.get("type") == "RollingUpdate", f"Kubernetes: strategy {strategy.get('type')!r}, not RollingUpdate")
        rolling = strategy.get("rollingUpdate", {})
        require(unavailable_of(rolling.get("maxUnavailable", "25%"), replicas) == 0,
                f"Kubernetes: maxUnavailable {rolling.get('maxUnavailable', '25% (the default)')!r}: "
                "a replica stops before its successor is ready")
        require(surge_of(rolling.get("maxSurge", "25%"), replicas) >= 1, "Kubernetes: maxSurge 0 with maxUnavailable 0 cannot roll")
        desired = self.x.service.get("desiredCount", 0)
        dc = self.x.service.get("deploymentConfiguration", {})
        require(dc.get("minimumHealthyPercent") == 100,
                f"ECS: minimumHealthyPercent {dc.get('minimumHealthyPercent')!r}, not 100: a task stops before its successor is healthy")
        most = math.floor(desired * dc.get("maximumPercent", 200) / 100)
        require(most >= desired + 1, f"ECS: maximumPercent {dc.get('maximumPercent')} of {desired} tasks is {most}: no room for a new task")
        breaker = dc.get("deploymentCircuitBreaker", {})
        require(breaker.get("enable") is True and breaker.get("rollback") is True,
                "ECS: the deployment circuit breaker is not on with rollback")
        controller = self.x.service.get("deploymentController", {}).get("type", "ECS")
        require(controller == "ECS", f"ECS: deployment controller {controller!r} (the rolling update needs ECS)")
        return f"Kubernetes maxUnavailable 0, maxSurge {rolling.get('maxSurge')}; ECS {desired} tasks, up to {most}, breaker on"

    def readiness(self):
        container = self.x.container()
        host, port = listen_port(plain(k8s_env(container).get("LISTEN_ADDR", {})), "Kubernetes")
        require(host in {"0.0.0.0", "[::]"}, f"Kubernetes: LISTEN_ADDR host {host}: the kubelet's probes cannot reach it")
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}

        def probe(name, path):
            spec = container.get(name)
            require(spec and "httpGet" in spec, f"Kubernetes: no {name} with httpGet")
            got = spec["httpGet"]
            require(got.get("path") == path, f"Kubernetes: {name} on {got.get('path')!r}, not {path}")
            probe_port = ports.get(got.get("port"), got.get("port"))
            require(probe_port == port, f"Kubernetes: {name} on port {got.get('port')!r}, LISTEN_ADDR's is {port}")

        probe("readinessProbe", "/readyz")
        probe("livenessProbe", "/healthz")
        ecs = self.x.ecs_container()
        _, ecs_port = listen_port(ecs_env(ecs).get("LISTEN_ADDR", ("value", None))[1], "ECS")
        command = (ecs.get("healthCheck") or {}).get("command") or []
        require(command[:2] == ["CMD", "/bin/wget"], f"ECS: healthCheck {command!r} does not run /bin/wget (the image has no shell)")
        url = f"http://127.0.0.1:{ecs_port}/readyz"
        require(url in command, f"ECS: healthCheck {command!r} does not request {url}")
        health = ecs["healthCheck"]
        for field, (low, high, default) in ECS_HEALTH_CHECK_RANGES.items():
            value = health.get(field, default)
            require(low <= value <= high, f"ECS: healthCheck {field} {value} is not within ECS's {low}-{high}")
        require(health.get("timeout", 5) < health.get("interval", 30), "ECS: healthCheck timeout is not under its interval")
        return f"Kubernetes readiness /readyz, liveness /healthz on {port}; ECS healthCheck {url}"

    def grace(self):
        pod = self.x.kind("Deployment")["spec"]["template"]["spec"]
        k8s_lease = lease_seconds(plain(k8s_env(self.x.container()).get("DEDUP_LEASE_SECONDS", {})))
        k8s_grace = pod.get("terminationGracePeriodSeconds", 30)
        require(k8s_grace >= needed_grace(k8s_lease),
                f"Kubernetes: terminationGracePeriodSeconds {k8s_grace} < {needed_grace(k8s_lease)} "
                f"(drain {DRAIN_SECONDS} + {DRAIN_CLOSE_SECONDS} + lease {k8s_lease} + {SHUTDOWN_GRACE_SECONDS})")
        ecs = self.x.ecs_container()
        ecs_lease = lease_seconds(ecs_env(ecs).get("DEDUP_LEASE_SECONDS", ("value", None))[1])
        stop = ecs.get("stopTimeout", 30)
        require(needed_grace(ecs_lease) <= stop <= FARGATE_MAX_STOP_TIMEOUT,
                f"ECS: stopTimeout {stop} not within {needed_grace(ecs_lease)}-{FARGATE_MAX_STOP_TIMEOUT}")
        return f"Kubernetes {k8s_grace} s, ECS {stop} s, >= {needed_grace(k8s_lease)} s"

    def tokens(self):
        k8s = k8s_env(self.x.container())
        for name in TOKEN_VARIABLES:
            entry = k8s.get(name, {})
            require("secretKeyRef" in entry.get("valueFrom", {}), f"Kubernetes: {name} is not from a Secret (secretKeyRef)")
        ecs = ecs_env(self.x.ecs_container())
        for name in TOKEN_VARIABLES:
            how, source = ecs.get(name, (None, None))
            require(how == "secret" and SECRETS_MANAGER_ARN.match(source or ""),
                    f"ECS: {name} is not from Secrets Manager (`secrets`, valueFrom an ARN)")
        sources = [(name, strings(d)) for name, d in self.x.manifests]
        sources += [("task-definition.json", strings(self.x.task_definition)), ("service.json", strings(self.x.service)),
                    ("Dockerfile", [self.x.dockerfile])] + [(n, [t]) for n, t in self.x.texts.items()]
        for where, texts in sources:
            for text in texts:
                for token in TOKEN_PATTERN.findall(text):
                    # Only the prefix is printed: a real token must not reach CI's log.
                    require(token in PLACEHOLDERS, f"{where}: a {token.split('-')[0]}- token ({len(token)} characters) "
                            f"that is not a placeholder ({', '.join(sorted(PLACEHOLDERS))})")
        return f"from a Secret and Secrets Manager; no token literal but {', '.join(sorted(PLACEHOLDERS))}"

    def secret_shape(self):
        secret = self.x.kind("Secret")
        data = {**secret.get("data", {}), **secret.get("stringData", {})}
        refs = [e["valueFrom"]["secretKeyRef"] for e in self.x.container().get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})]
        for ref in refs:
            require(ref.get("name") == secret["metadata"]["name"],
                    f"secretKeyRef names {ref.get('name')!r}, the example Secret is {secret['metadata']['name']!r}")
            require(ref.get("key") in data, f"secretKeyRef key {ref.get('key')!r} is not in the example Secret")
        require(set(data) == {r.get("key") for r in refs},
                f"the example Secret's keys {sorted(data)} are not the ones read {sorted(r.get('key') for r in refs)}")
        return f"{secret['metadata']['name']}: {', '.join(sorted(data))}"

    def hardening(self):
        pod = self.x.kind("Deployment")["spec"]["template"]["spec"]
        container = self.x.container()
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        require(context.get("runAsNonRoot") is True, "Kubernetes: runAsNonRoot is not true")
        require(context.get("runAsUser", 0) > 0, f"Kubernetes: runAsUser {context.get('runAsUser')!r} is root or unset")
        require(context.get("readOnlyRootFilesystem") is True, "Kubernetes: readOnlyRootFilesystem is not true")
        require(context.get("allowPrivilegeEscalation") is False, "Kubernetes: allowPrivilegeEscalation is not false")
        require("ALL" in context.get("capabilities", {}).get("drop", []), "Kubernetes: capabilities not all dropped")
        resources = container.get("resources", {})
        require(resources.get("requests", {}).get("memory") and resources.get("limits", {}).get("memory"),
                "Kubernetes: memory not both requested and limited")
        require(resources.get("requests", {}).get("cpu"), "Kubernetes: no cpu request")
        ecs = self.x.ecs_container()
        user = str(ecs.get("user", "")).split(":")[0]
        require(user.isdigit() and int(user) > 0, f"ECS: user {ecs.get('user')!r} is root or unset")
        require(ecs.get("readonlyRootFilesystem") is True, "ECS: readonlyRootFilesystem is not true")
        require("ALL" in ecs.get("linuxParameters", {}).get("capabilities", {}).get("drop", []), "ECS: capabilities not all dropped")
        require(ecs.get("privileged") is not True, "ECS: privileged")
        return f"uid {context['runAsUser']} / {ecs['user']}, read-only root, no capabilities"

    def disruption_budget(self):
        pdb = self.x.kind("PodDisruptionBudget")
        require(pdb.get("apiVersion") == "policy/v1", f"PodDisruptionBudget apiVersion {pdb.get('apiVersion')!r}")
        deployment = self.x.kind("Deployment")["spec"]
        labels = deployment["template"]["metadata"].get("labels", {})
        wanted = pdb["spec"].get("selector", {}).get("matchLabels", {})
        require(wanted and all(labels.get(k) == v for k, v in wanted.items()),
                f"the budget's selector {wanted} does not select the Deployment's pods {labels}")
        replicas = deployment.get("replicas", 1)
        spec = pdb["spec"]
        if "minAvailable" in spec:
            require(spec["minAvailable"] == replicas - 1,
                    f"minAvailable {spec['minAvailable']} of {replicas} replicas: want {replicas - 1} (one at a time, never blocked)")
            return f"minAvailable {spec['minAvailable']} of {replicas}"
        require(spec.get("maxUnavailable") == 1, f"maxUnavailable {spec.get('maxUnavailable')!r}: want 1")
        return f"maxUnavailable 1 of {replicas}"

    def fargate(self):
        task, service = self.x.task_definition, self.x.service
        require(task.get("requiresCompatibilities") == ["FARGATE"], f"requiresCompatibilities {task.get('requiresCompatibilities')!r}")
        require(task.get("networkMode") == "awsvpc", f"networkMode {task.get('networkMode')!r}, Fargate needs awsvpc")
        require(int(task.get("memory", 0)) in FARGATE_SIZES.get(str(task.get("cpu")), set()),
                f"cpu {task.get('cpu')!r} with memory {task.get('memory')!r} is no Fargate size")
        require(self.x.ecs_container().get("essential") is True, "the container is not essential")
        require(task.get("executionRoleArn"), "no executionRoleArn (it reads the secrets and pulls the image)")
        require(task.get("taskRoleArn"), "no taskRoleArn (the process's DynamoDB rights)")
        require(service.get("taskDefinition", "").split(":")[0] == task.get("family"),
                f"the service runs {service.get('taskDefinition')!r}, the family is {task.get('family')!r}")
        require(service.get("launchType") == "FARGATE", f"the service's launchType {service.get('launchType')!r}")
        vpc = service.get("networkConfiguration", {}).get("awsvpcConfiguration", {})
        require(vpc.get("subnets"), "the service has no awsvpcConfiguration subnets")
        require(vpc.get("assignPublicIp", "DISABLED") == "DISABLED", "the tasks get a public IP (Socket Mode needs no inbound)")
        return f"{task['cpu']} cpu / {task['memory']} MiB, awsvpc, {len(vpc['subnets'])} subnets"

    def image(self):
        stages = re.findall(r"^FROM\s+(\S+)", self.x.dockerfile, re.M)
        require(stages and stages[-1] == "scratch", f"the final stage is FROM {stages[-1] if stages else '?'}, not scratch")
        final = self.x.dockerfile[self.x.dockerfile.rindex("FROM scratch"):]
        users = re.findall(r"^USER\s+(\S+)", final, re.M)
        require(users, "the final stage sets no USER (it would run as root)")
        uid = users[-1].split(":")[0]
        require(uid.isdigit() and int(uid) > 0, f"USER {users[-1]} is not a numeric non-root user (FROM scratch has no /etc/passwd)")
        require(re.search(r'^ENTRYPOINT\s+\["/slack-once"\]', final, re.M), "ENTRYPOINT is not [\"/slack-once\"]")
        require(re.search(r"^COPY\s+.*\s/slack-once$", final, re.M), "the binary is not copied to /slack-once")
        k8s_uid = {**self.x.kind("Deployment")["spec"]["template"]["spec"].get("securityContext", {}),
                   **self.x.container().get("securityContext", {})}.get("runAsUser")
        ecs_user = str(self.x.ecs_container().get("user", "")).split(":")[0]
        require(str(k8s_uid) == uid and ecs_user == uid, f"the image's USER {uid}, Kubernetes runs {k8s_uid}, ECS {ecs_user}")
        command = (self.x.ecs_container().get("healthCheck") or {}).get("command") or []
        if "/bin/wget" in command:
            require(re.search(r"^COPY\s+.*\s/bin/wget$", final, re.M), "the ECS health check runs /bin/wget, which the image lacks")
        return f"FROM scratch, USER {users[-1]}, /slack-once, /bin/wget"

    CHECKS = {"k8s-schema": k8s_schema, "ecs-schema": ecs_schema, "env": env, "connections": connections,
              "rollout": rollout, "readiness": readiness, "grace": grace, "tokens": tokens,
              "secret-shape": secret_shape, "hardening": hardening, "disruption-budget": disruption_budget,
              "fargate": fargate, "image": image}

    def all(self, verbose=False):
        """check id -> its failure; prints each result when verbose."""
        failed = {}
        for cid, check in self.CHECKS.items():
            try:
                detail = check(self)
                if verbose:
                    print(f"ok      {cid:<18} {detail}")
            except (CheckFailed, KeyError, TypeError, ValueError, AttributeError) as e:
                message = str(e) if isinstance(e, CheckFailed) else f"{type(e).__name__}: {e}"
                failed[cid] = message
                if verbose:
                    print(f"FAILED  {cid:<18} {message}")
        return failed


def load_schemas(deploy):
    folder = Path(deploy) / SCHEMAS
    definitions = json.loads((folder / "_definitions.json").read_text())
    by_file = {f: json.loads((folder / f).read_text()) for f in K8S_SCHEMA_FILES.values()}
    # The kinds' files refer to "/api/_definitions.json#/$defs/…" from their $id
    # (https://kubernetes.io/api/<kind>/…): the registry answers that address offline.
    registry = Registry().with_resources(
        [(definitions["$id"], Resource.from_contents(definitions))]
        + [(schema["$id"], Resource.from_contents(schema)) for schema in by_file.values()])
    return registry, by_file


# ---------------------------------------------------------------------------------------------
# The self-test: each mutation, and the checks it must make fail


def deployment(x):
    return x.kind("Deployment")


def container(x):
    return x.container()


def env_entry(entries, name):
    return next(e for e in entries if e["name"] == name)


def set_k8s_env(x, name, value):
    entry = env_entry(x.container()["env"], name)
    entry.clear()
    entry.update({"name": name, "value": value})


def drop_k8s_env(x, name):
    x.container()["env"].remove(env_entry(x.container()["env"], name))


def set_ecs_env(x, name, value):
    env_entry(x.ecs_container()["environment"], name)["value"] = value


def manifest(x, kind):
    return x.kind(kind)


MUTATIONS = [
    ("a misspelt field in the Deployment (readinessprobe)", {"k8s-schema"},
     lambda x: container(x).update(readinessprobe=container(x)["readinessProbe"])),
    ("replicas as a string", {"k8s-schema"}, lambda x: deployment(x)["spec"].update(replicas="3")),
    ("the PodDisruptionBudget on policy/v1beta1", {"k8s-schema", "disruption-budget"},
     lambda x: manifest(x, "PodDisruptionBudget").update(apiVersion="policy/v1beta1")),
    ("an unknown key in the task definition (healthcheck)", {"ecs-schema"},
     lambda x: x.ecs_container().update(healthcheck=x.ecs_container()["healthCheck"])),
    ("stopTimeout as a string", {"ecs-schema"}, lambda x: x.ecs_container().update(stopTimeout="60")),
    ("desiredCount misspelt in the service", {"ecs-schema"},
     lambda x: x.service.update(desiredcount=x.service.pop("desiredCount"))),
    ("no DEDUP_TABLE in the Deployment (each replica its own ledger)", {"env"},
     lambda x: drop_k8s_env(x, "DEDUP_TABLE")),
    ("a SLACK_SIGNING_SECRET in the task definition", {"env"},
     lambda x: x.ecs_container()["secrets"].append(
         {"name": "SLACK_SIGNING_SECRET", "valueFrom": x.ecs_container()["secrets"][0]["valueFrom"]})),
    ("another DEDUP_TABLE on ECS than on Kubernetes", {"env"}, lambda x: set_ecs_env(x, "DEDUP_TABLE", "another-table")),
    ("4 replicas", {"connections", "disruption-budget"}, lambda x: deployment(x)["spec"].update(replicas=4)),
    ("SLACK_SOCKET_CONNECTIONS 3 on both", {"connections"},
     lambda x: (set_k8s_env(x, "SLACK_SOCKET_CONNECTIONS", "3"), set_ecs_env(x, "SLACK_SOCKET_CONNECTIONS", "3"))),
    ("SLACK_SOCKET_CONNECTIONS 11", {"connections", "env"}, lambda x: set_k8s_env(x, "SLACK_SOCKET_CONNECTIONS", "11")),
    ("maxSurge 50% (2 of 3, rounded up)", {"connections"},
     lambda x: deployment(x)["spec"]["strategy"]["rollingUpdate"].update(maxSurge="50%")),
    ("ECS maximumPercent 200 (6 tasks)", {"connections"},
     lambda x: x.service["deploymentConfiguration"].update(maximumPercent=200)),
    ("ECS desiredCount 4", {"connections"}, lambda x: x.service.update(desiredCount=4)),
    ("maxUnavailable 1", {"rollout"},
     lambda x: deployment(x)["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1)),
    ("no rollingUpdate (25% unavailable by default: 0 of 3, but 25% surge: 1)", set(),
     lambda x: deployment(x)["spec"]["strategy"].pop("rollingUpdate")),
    ("the Recreate strategy", {"rollout"}, lambda x: deployment(x)["spec"].update(strategy={"type": "Recreate"})),
    ("ECS minimumHealthyPercent 50", {"rollout"},
     lambda x: x.service["deploymentConfiguration"].update(minimumHealthyPercent=50)),
    ("ECS maximumPercent 100 (no room for a new task)", {"rollout"},
     lambda x: x.service["deploymentConfiguration"].update(maximumPercent=100)),
    ("the circuit breaker off", {"rollout"},
     lambda x: x.service["deploymentConfiguration"]["deploymentCircuitBreaker"].update(enable=False)),
    ("the readiness probe on /healthz", {"readiness"},
     lambda x: container(x)["readinessProbe"]["httpGet"].update(path="/healthz")),
    ("the liveness probe on /readyz", {"readiness"},
     lambda x: container(x)["livenessProbe"]["httpGet"].update(path="/readyz")),
    ("no readiness probe", {"readiness"}, lambda x: container(x).pop("readinessProbe")),
    ("LISTEN_ADDR 127.0.0.1:3000 in the pod", {"readiness"}, lambda x: set_k8s_env(x, "LISTEN_ADDR", "127.0.0.1:3000")),
    ("the probes on another port than LISTEN_ADDR's", {"readiness"},
     lambda x: set_k8s_env(x, "LISTEN_ADDR", "0.0.0.0:8080")),
    ("the ECS health check on /healthz", {"readiness"},
     lambda x: x.ecs_container()["healthCheck"].update(
         command=["CMD", "/bin/wget", "-q", "-O", "/dev/null", "http://127.0.0.1:3000/healthz"])),
    ("the ECS health check through a shell (none in the image)", {"readiness"},
     lambda x: x.ecs_container()["healthCheck"].update(
         command=["CMD-SHELL", "curl -f http://127.0.0.1:3000/readyz || exit 1"])),
    ("ECS health check retries 11 (ECS allows 1-10)", {"readiness"},
     lambda x: x.ecs_container()["healthCheck"].update(retries=11)),
    ("terminationGracePeriodSeconds 30 (Kubernetes' default)", {"grace"},
     lambda x: deployment(x)["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30)),
    ("a 60 s lease with the 60 s grace", {"grace"},
     lambda x: container(x)["env"].append({"name": "DEDUP_LEASE_SECONDS", "value": "60"})),
    ("ECS stopTimeout 30 (ECS's default)", {"grace"}, lambda x: x.ecs_container().update(stopTimeout=30)),
    ("ECS stopTimeout 180 (over Fargate's 120)", {"grace"}, lambda x: x.ecs_container().update(stopTimeout=180)),
    ("SLACK_APP_TOKEN as a literal in the Deployment", {"tokens", "secret-shape"},
     lambda x: set_k8s_env(x, "SLACK_APP_TOKEN", "xapp-1-A0123456789-1234567890123-0a1b2c3d4e5f")),
    ("SLACK_BOT_TOKEN in the task definition's environment", {"tokens"},
     lambda x: (x.ecs_container()["secrets"].pop(1),
                x.ecs_container()["environment"].append({"name": "SLACK_BOT_TOKEN", "value": "xoxb-123456789012-1234567890123-AbCdEfGh"}))),
    ("a real-looking token in the example Secret", {"tokens"},
     lambda x: manifest(x, "Secret")["stringData"].update({"bot-token": "xoxb-123456789012-1234567890123-AbCdEfGh"})),
    ("a token in a comment of a deploy/ text", {"tokens"},
     lambda x: x.texts.update({"kubernetes/notes.md": "use xoxp-1234-5678-90ab"})),
    ("SLACK_BOT_TOKEN's secret not a Secrets Manager ARN", {"tokens"},
     lambda x: x.ecs_container()["secrets"][1].update(valueFrom="slack-once-tokens")),
    ("a secretKeyRef to another Secret", {"secret-shape"},
     lambda x: container(x)["env"][0]["valueFrom"]["secretKeyRef"].update(name="slack-tokens")),
    ("a key the example Secret lacks", {"secret-shape"},
     lambda x: manifest(x, "Secret")["stringData"].pop("bot-token")),
    ("runAsNonRoot removed and runAsUser 0", {"hardening", "image"},
     lambda x: (deployment(x)["spec"]["template"]["spec"]["securityContext"].pop("runAsNonRoot"),
                deployment(x)["spec"]["template"]["spec"]["securityContext"].update(runAsUser=0))),
    ("a writable root filesystem", {"hardening"},
     lambda x: container(x)["securityContext"].update(readOnlyRootFilesystem=False)),
    ("no memory limit", {"hardening"}, lambda x: container(x)["resources"].pop("limits")),
    ("ECS as root", {"hardening", "image"}, lambda x: x.ecs_container().update(user="0")),
    ("ECS with a writable root filesystem", {"hardening"},
     lambda x: x.ecs_container().update(readonlyRootFilesystem=False)),
    ("minAvailable 3 of 3 (a drain blocks)", {"disruption-budget"},
     lambda x: manifest(x, "PodDisruptionBudget")["spec"].update(minAvailable=3)),
    ("minAvailable 1 of 3 (two evicted at once)", {"disruption-budget"},
     lambda x: manifest(x, "PodDisruptionBudget")["spec"].update(minAvailable=1)),
    ("a budget selecting other pods", {"disruption-budget"},
     lambda x: manifest(x, "PodDisruptionBudget")["spec"]["selector"].update(matchLabels={"app": "other"})),
    ("networkMode bridge", {"fargate"}, lambda x: x.task_definition.update(networkMode="bridge")),
    ("cpu 256 with 4096 MiB", {"fargate"}, lambda x: x.task_definition.update(memory="4096")),
    ("the service running another family", {"fargate"}, lambda x: x.service.update(taskDefinition="other:3")),
    ("a public IP", {"fargate"},
     lambda x: x.service["networkConfiguration"]["awsvpcConfiguration"].update(assignPublicIp="ENABLED")),
    ("the image without USER", {"image"}, lambda x: setattr(x, "dockerfile", re.sub(r"^USER .*$", "", x.dockerfile, flags=re.M))),
    ("the image on a distribution base", {"image"},
     lambda x: setattr(x, "dockerfile", x.dockerfile.replace("FROM scratch", "FROM debian:bookworm-slim"))),
    ("the image without /bin/wget", {"image"},
     lambda x: setattr(x, "dockerfile", re.sub(r"^COPY --from=probe.*$", "", x.dockerfile, flags=re.M))),
]


def self_test(examples, schemas, quiet=False):
    print("== self-test: each check fails on the examples broken the way it guards against")
    bad = []
    for what, expected, mutate in MUTATIONS:
        x = copy.deepcopy(examples)
        try:
            mutate(x)
        except (LookupError, StopIteration, ValueError, TypeError, CheckFailed) as e:
            bad.append(what)
            print(f"FAILED  self-test          {what}: the mutation does not apply any more ({e!r}); update it with the examples")
            continue
        failed = Checks(x, schemas).all()
        if not expected:
            # A change that must stay accepted (a default Kubernetes fills in as wanted).
            if failed:
                bad.append(what)
                print(f"FAILED  self-test          {what}: want every check to pass, failed: {', '.join(sorted(failed))}")
            elif not quiet:
                print(f"ok      self-test          {what}: every check passes")
        elif expected <= set(failed):
            also = sorted(set(failed) - expected)
            if not quiet:
                print(f"ok      self-test          {what}: " + "; ".join(f"{c} failed ({failed[c][:200]})" for c in sorted(expected)) +
                      (f"; also {', '.join(also)}" if also else ""))
        else:
            bad.append(what)
            print(f"FAILED  self-test          {what}: want {', '.join(sorted(expected))} to fail, "
                  f"failed: {', '.join(sorted(failed)) or 'nothing'}")
    untested = sorted(set(Checks.CHECKS) - set().union(*(expected for _, expected, _ in MUTATIONS)))
    if untested:
        bad.append("coverage")
        print(f"FAILED  self-test          no breakage makes {', '.join(untested)} fail")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deploy", default=str(ROOT / "deploy"), help="the examples' folder (default: deploy/)")
    ap.add_argument("--self-test", action="store_true", help="then break the examples to see each check fail")
    ap.add_argument("-q", "--quiet", action="store_true", help="print the failures only")
    args = ap.parse_args()
    try:
        examples, schemas = Examples(args.deploy), load_schemas(args.deploy)
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"deploy-examples-check: cannot read the examples: {e}", file=sys.stderr)
        return 2
    print(f"== deploy-examples-check: {args.deploy} (Kubernetes v1.31.0 schemas, botocore's ecs model, offline)")
    failed = Checks(examples, schemas).all(verbose=not args.quiet)
    for cid, message in failed.items():
        if args.quiet:
            print(f"FAILED  {cid:<18} {message}")
    bad = self_test(examples, schemas, args.quiet) if args.self_test else []
    if failed or bad:
        print(f"deploy-examples-check: {len(failed)} check(s) failed" + (f", {len(bad)} self-test(s) failed" if bad else ""))
        return 1
    print("deploy-examples-check: all checks passed" + (f", and each of {len(MUTATIONS)} breakages was caught" if args.self_test else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
