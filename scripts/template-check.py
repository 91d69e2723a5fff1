#!/usr/bin/env python3
"""Checks template.yaml through AWS SAM's own translator, for every value of Mode and of
ManagedInstances.

What it asserts (each line of its output names one check and the mode it ran in, ", LMI" when
ManagedInstances=true; "the ingress" and "the worker" are then SlackOnceManagedFunction and
SlackOnceManagedWorker, the twins of SlackOnceFunction and SlackOnceWorker):

  ingress-role     the ingress's role allows dynamodb:PutItem and UpdateItem on the ledger AND sqs:SendMessage
                   on the work queue, whatever Mode says (the role is shared by every version and
                   changes at once; the old version keeps most traffic during a gradual deploy)
  queue-worker     the work queue (redriving to the dead-letter queue), the dead-letter queue and
                   the worker exist, whatever Mode says (what old versions queued is answered); the
                   worker's WORK_QUEUE_URL is the queue (it hands a released record back on it)
  ingress-env      the ingress's environment, which each published version captures, says the
                   mode: WORK_QUEUE_URL only in deferred mode; DEDUP_TABLE in both (a deferred
                   ingress reads the app's state there)
  mapping          the worker's SQS event source mapping is declared explicitly (no SAM SQS event),
                   on the work queue, invokes the worker's live alias (which CodeDeploy shifts), with
                   ReportBatchItemFailures, BatchSize and MaximumConcurrency from the parameters
  worker-role      the worker's role allows Receive/Delete/ChangeMessageVisibility/GetQueueAttributes
                   on the work queue itself
  no-sqs-star      no role has a managed policy that could allow SQS (only known ones are accepted),
                   nor a statement allowing an SQS action on "*"
  worker-alarm     the new worker version's failures alarm exists, counts that version's
                   WorkerErrors and DeadLettered (and Failed in deferred mode), no other version's,
                   decides within the canary, and is in the worker deployment's alarms
  failure-rate     the Slack failure-rate alarm counts each event once in its denominator (a
                   deferred event is a delivery, outcome Queued, and one of the worker's QueuedEvents)
  mode-publishes   changing Mode alone publishes a new ingress version
  no-spurious      changing LogRetentionDays alone (or any parameter no version captures) publishes
                   no version (a publish with nothing changed fails the deploy)
  version-params   per function: a parameter publishes a new version exactly when the version's
                   configuration depends on it; the version description names exactly those
  code-publishes   a code change publishes new versions of both functions
  description-len  the version descriptions fit Lambda's 256 characters for the longest parameters
  refs-exist       every Ref, GetAtt and ${...} of the deployed resources and outputs names a
                   resource that exists for those parameters (one twin of each pair exists)
  alarm-targets    the alarms of each function's deployment group watch that function's new version
                   and nothing of another function
  lmi-off          ManagedInstances=false: no capacity provider, no operator role, no function with
                   CapacityProviderConfig, the ordinary functions; and no other ManagedInstances*
                   parameter changes anything deployed (--baseline FILE also compares the whole
                   deployed stack with FILE's, e.g. the template before Lambda Managed Instances)
  lmi-on           ManagedInstances=true: one capacity provider in ManagedInstancesSubnetIds with the
                   security groups (none: []) and the functions' architecture, MaxVCpuCount from its
                   parameter; both functions attached to it with PerExecutionEnvironmentMaxConcurrency
                   and the memory per vCPU from theirs, at least 2 GB, the same architecture, no
                   ReservedConcurrentExecutions; the Function URL and the outputs on the managed ingress
  operator-role    ManagedInstances=true: the provider's operator role trusts lambda.amazonaws.com
                   (sts:AssumeRole) only, holds AWSLambdaManagedEC2ResourceOperator and nothing else,
                   and no function's role holds that policy or any EC2 launch or iam:PassRole right
  lmi-rules        the template's Rules refuse ManagedInstances=true without subnets (or with an empty
                   entry), with a message naming ManagedInstancesSubnetIds, and accept the rest
  own-items        with SlackClientId set, each function's role, its Allow and Deny statements evaluated with
                   their dynamodb:LeadingKeys conditions: Get/Put/Update (Delete: installations) on this
                   app's installation, OAuth-state and pacing items (keys that start with the kind and
                   the app's client id); none of these on another app's (another client id); the
                   previous release's items (keyed without the app) and the ledger's keys as before
  twins            each managed twin's source properties equal its ordinary twin's but for
                   CapacityProviderConfig, MemorySize, ReservedConcurrentExecutions and a
                   VersionDescription that extends the ordinary one

"Publishes a new version" means: the AWS::Lambda::Version's logical id changes (SAM's hash of the
code and the environment's text), or one of its create-only properties (CloudFormation's resource
schema, as cfn-lint ships it) resolves differently, so that CloudFormation replaces it.

Then it checks itself: it breaks the template in memory in the ways each check exists for and
confirms that the check fails (--no-self-test skips that).

Usage: .tools/sam/bin/python scripts/template-check.py [--template PATH] [--baseline PATH] [--no-self-test] [-q]
(the .tools/sam virtual environment, from scripts/tools.sh sam, has aws-sam-translator and cfn-lint).
Exit status: 0 when every check passes, 1 when one fails, 2 when the template cannot be read.
"""

import argparse
import ast
import copy
import fnmatch
import json
import logging
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
logging.disable(logging.CRITICAL)  # the translator logs feature toggles and its own metrics

try:
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator
    from samtranslator.yaml_helper import yaml_parse
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER
except ImportError as e:  # pragma: no cover
    sys.exit(f"template-check: {e}: run it with .tools/sam/bin/python (scripts/tools.sh sam installs it)")

ROOT = Path(__file__).resolve().parent.parent

INGRESS, WORKER = "SlackOnceFunction", "SlackOnceWorker"
# Their twins on Lambda Managed Instances (ManagedInstances=true); exactly one of each pair exists.
MANAGED_INGRESS, MANAGED_WORKER = "SlackOnceManagedFunction", "SlackOnceManagedWorker"
TWINS = {INGRESS: MANAGED_INGRESS, WORKER: MANAGED_WORKER}
PROVIDER, OPERATOR_POLICY = "ManagedInstancesProvider", "AWSLambdaManagedEC2ResourceOperator"
SWITCH = "ManagedInstances"
# What ManagedInstances=true is checked with (the subnets are required then).
LMI_SUBNETS = "subnet-0a1b2c3d4e5f60718,subnet-0b1c2d3e4f5a60729,subnet-0c1d2e3f4a5b6073a"
LMI_SECURITY_GROUPS = "sg-0123456789abcdef0"
# Properties a managed twin may set otherwise than its ordinary twin (lmi-on checks what they are).
TWIN_DIFFERENCES = {"CapacityProviderConfig", "MemorySize", "ReservedConcurrentExecutions", "VersionDescription"}
LMI_MIN_MEMORY = 2048  # "The minimum supported function size is 2GB and 1 vCPU" (LMI best practices)
LEDGER, QUEUE, DLQ = "LedgerTable", "WorkQueue", "WorkDeadLetterQueue"
WORKER_ALARM, RATE_ALARM = "NewWorkerVersionFailuresAlarm", "SlackFailureRateAlarm"
# What the binary sends to the ledger: a claim puts a key never seen, everything else updates.
# Multi-workspace mode's installation store (in the same table) deletes an uninstalled one.
LEDGER_ACTIONS = ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:DeleteItem"]
# The keys of the installation store (src/workspaces/mod.rs: item_key, pace_key, state_key), for the
# app OWN_CLIENT and another app on the same table; the previous release's, keyed without the app; and
# the ledger's own (an event's id, a message's key, a state value's).
OWN_CLIENT, OTHER_CLIENT = "1111.0001", "2222.0002"


def app_keys(client):
    return {"installation": [f"install#{client}#WORKSPACE#T0001", f"install#{client}#ENTERPRISE#E0001"],
            "pacing": [f"install-pace#{client}#WORKSPACE#T0001#conversations.history"],
            "oauth-state": [f"oauth-state#{client}#0123456789abcdef0123456789abcdef"],
            "sealing mark": [f"install-sealed#{client}"]}


PREVIOUS_RELEASE_KEYS = {"installation": ["install#WORKSPACE#T0001", "install#ENTERPRISE#E0001"],
                         "pacing": ["install-pace#WORKSPACE#T0001#conversations.replies"],
                         "oauth-state": ["oauth-state#0123456789abcdef0123456789abcdef"]}
LEDGER_KEYS = ["Ev0123ABCD", "msg-T0001-C0001-1700000000.000100", "state-A0001-open-polls"]
ITEM_ACTIONS = ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
WORKER_SQS_ACTIONS = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]
# Managed policies whose statements are known (AWS's documentation of each); any other one cannot be
# read offline, so it fails no-sqs-star. Neither of these allows an SQS action.
KNOWN_MANAGED = {
    "service-role/AWSLambdaBasicExecutionRole": "logs:CreateLogGroup, logs:CreateLogStream, logs:PutLogEvents",
    "service-role/AWSCodeDeployRoleForLambda": "cloudwatch:DescribeAlarms, lambda:*Alias, sns:Publish, s3:GetObject*, "
    "lambda:InvokeFunction on CodeDeployHook_* functions",
    # The operator role's (docs.aws.amazon.com/lambda, "Lambda operator role for Lambda Managed Instances").
    OPERATOR_POLICY: "ec2:RunInstances, CreateTags, AttachNetworkInterface on Lambda-managed instances "
    "(ec2:ManagedResourceOperator = scaler.lambda.amazonaws.com), ec2:Describe*, RunInstances and "
    "CreateNetworkInterface on subnets and security groups, RunInstances on Amazon-owned images",
}
SQS_ACTIONS = [f"sqs:{a}" for a in (
    "SendMessage ReceiveMessage DeleteMessage ChangeMessageVisibility GetQueueAttributes GetQueueUrl "
    "ListQueues PurgeQueue DeleteQueue CreateQueue SetQueueAttributes StartMessageMoveTask "
    "ListDeadLetterSourceQueues ListMessageMoveTasks TagQueue AddPermission").split()]
# Properties of the translated AWS::Lambda::Function that each published version captures (its code
# and configuration). ReservedConcurrentExecutions, tags and the URL belong to the function.
VERSION_CAPTURED = ["Environment", "Timeout", "MemorySize", "Architectures", "Runtime", "Handler", "Layers",
                    "VpcConfig", "EphemeralStorage", "TracingConfig", "KmsKeyArn", "DeadLetterConfig",
                    "FileSystemConfigs", "ImageConfig", "SnapStart", "LoggingConfig", "RuntimeManagementConfig",
                    "PackageType", "Role", "CapacityProviderConfig"]
NOVALUE = object()


class CheckFailed(Exception):
    pass


# ------------------------------------------------------------------ translation and evaluation

def packaged(template, code="code-1"):
    """The template as `sam package` hands it to CloudFormation: each function's code in S3
    (the key names the build, so another `code` is another build)."""
    t = copy.deepcopy(template)
    for name, r in t.get("Resources", {}).items():
        if r.get("Type") == "AWS::Serverless::Function":
            r.setdefault("Properties", {})["CodeUri"] = f"s3://template-check/{code}/{name}.zip"
    return t


def parameters(template, overrides=None):
    """Every parameter's value as CloudFormation passes it: a string, the default unless given."""
    values = {}
    for name, p in template.get("Parameters", {}).items():
        if "Default" in p:
            values[name] = str(p["Default"])
    values.update({k: str(v) for k, v in (overrides or {}).items()})
    return values


class Deployed:
    """SAM's translation of the template for `params`, as CloudFormation would deploy it: the
    conditions decided, each Fn::If taken, AWS::NoValue dropped, resources whose condition is false
    left out, parameters substituted. References to resources stay as they are."""

    def __init__(self, template, params, code="code-1"):
        self.params = params
        # A list parameter's value, as CloudFormation passes it: "" is [""].
        self.lists = {n for n, p in template.get("Parameters", {}).items()
                      if p.get("Type") == "CommaDelimitedList" or str(p.get("Type", "")).startswith("List<")}
        try:
            out = Translator(managed_policy_map={}, sam_parser=Parser()).translate(
                packaged(template, code), parameter_values=dict(params))
        except Exception as e:  # the translator's InvalidDocumentException lists every error
            raise CheckFailed(f"SAM's translator refuses the template: {e}") from e
        self.raw = out
        self.conditions = out.get("Conditions", {})
        self._decided = {}
        self.resources = {}
        for name, r in out.get("Resources", {}).items():
            if "Condition" in r and not self.condition(r["Condition"]):
                continue
            self.resources[name] = self.eval(r)
        self.outputs = {k: self.eval(v) for k, v in out.get("Outputs", {}).items()
                        if "Condition" not in v or self.condition(v["Condition"])}

    def function(self, ordinary):
        """`ordinary` (INGRESS or WORKER) or its managed twin: whichever exists, which must be one."""
        there = [n for n in (ordinary, TWINS[ordinary]) if n in self.resources]
        if len(there) != 1:
            raise CheckFailed(f"{' and '.join(there) or 'neither ' + ordinary + ' nor ' + TWINS[ordinary]} "
                              f"{'exist' if there else 'exists'} for ManagedInstances={self.params.get(SWITCH)}: "
                              "want exactly one of the twins")
        return there[0]

    @property
    def ingress(self):
        return self.function(INGRESS)

    @property
    def worker(self):
        return self.function(WORKER)

    def condition(self, name):
        if name not in self._decided:
            self._decided[name] = self._cond(self.conditions[name])
        return self._decided[name]

    def _cond(self, c):
        (fn, args), = c.items()
        if fn == "Condition":
            return self.condition(args)
        if fn == "Fn::Equals":
            a, b = (self.eval(x) for x in args)
            return str(a) == str(b)
        if fn == "Fn::Not":
            return not self._cond(args[0])
        if fn == "Fn::And":
            return all(self._cond(x) for x in args)
        if fn == "Fn::Or":
            return any(self._cond(x) for x in args)
        raise CheckFailed(f"unknown condition function {fn}")

    def sub(self, text, local=None):
        local = local or {}

        def one(m):
            name = m.group(1)
            if name in local and isinstance(local[name], str):
                return local[name]
            # A variable that names a resource is that resource's ${...}, as if written in place.
            if name in local and isinstance(local[name], dict) and list(local[name]) == ["Ref"]:
                return "${" + local[name]["Ref"] + "}"
            if name in local and isinstance(local[name], dict) and list(local[name]) == ["Fn::GetAtt"]:
                att = local[name]["Fn::GetAtt"]
                return "${" + (".".join(att) if isinstance(att, list) else att) + "}"
            if name in self.params:
                return self.params[name]
            return m.group(0)
        return re.sub(r"\$\{([^!}][^}]*)\}", one, text)

    def eval(self, node):
        if isinstance(node, list):
            return [v for v in (self.eval(x) for x in node) if v is not NOVALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (fn, args), = node.items()
            if fn == "Ref":
                if args == "AWS::NoValue":
                    return NOVALUE
                if args in self.lists and args in self.params:
                    return self.params[args].split(",")
                return self.params.get(args, node)
            if fn == "Fn::Join":
                sep, items = args
                items = self.eval(items)
                if isinstance(items, list) and all(isinstance(x, str) for x in items):
                    return sep.join(items)
            if fn == "Fn::If":
                return self.eval(args[1] if self.condition(args[0]) else args[2])
            if fn == "Fn::Sub":
                if isinstance(args, str):
                    text = self.sub(args)
                else:
                    text = self.sub(args[0], self.eval(args[1]))
                return text if "${" not in text.replace("${!", "") else {"Fn::Sub": text}
            if fn == "Fn::FindInMap":
                keys = self.eval(args)
                if all(isinstance(k, str) for k in keys):
                    return self.eval(self.raw["Mappings"][keys[0]][keys[1]][keys[2]])
        out = {}
        for k, v in node.items():
            v = self.eval(v)
            if v is not NOVALUE:
                out[k] = v
        return out

    # -------------------------------------------------------------- look-ups

    def of_type(self, rtype):
        return {k: r for k, r in self.resources.items() if r["Type"] == rtype}

    def props(self, name):
        r = self.resources.get(name)
        if r is None:
            raise CheckFailed(f"no resource {name}")
        return r.get("Properties", {})

    def version_of(self, function):
        versions = [k for k, r in self.of_type("AWS::Lambda::Version").items()
                    if r["Properties"].get("FunctionName") == {"Ref": function}]
        if len(versions) != 1:
            raise CheckFailed(f"{function} has {len(versions)} published versions, not 1 (AutoPublishAlias)")
        return versions[0]

    def alias_of(self, function):
        aliases = [k for k, r in self.of_type("AWS::Lambda::Alias").items()
                   if r["Properties"].get("FunctionName") == {"Ref": function}]
        if len(aliases) != 1:
            raise CheckFailed(f"{function} has {len(aliases)} aliases, not 1")
        return aliases[0]

    def role_of(self, function):
        role = self.props(function).get("Role")
        if isinstance(role, dict) and "Fn::GetAtt" in role:
            return role["Fn::GetAtt"][0]
        raise CheckFailed(f"{function}'s role is not one of this stack's: {role}")

    def statements(self, role):
        """Every statement of the role's inline policies, and of this stack's IAM policies attached to it."""
        docs = [p["PolicyDocument"] for p in self.props(role).get("Policies", [])]
        for r in self.resources.values():
            if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy"):
                p = r["Properties"]
                if {"Ref": role} in p.get("Roles", []) or p.get("RoleName") == {"Ref": role}:
                    docs.append(p["PolicyDocument"])
        out = []
        for d in docs:
            s = d.get("Statement", [])
            out.extend(s if isinstance(s, list) else [s])
        return out

    def identity(self, function, create_only):
        """What decides whether a deploy publishes a new version of `function`: the version's
        logical id and the values of its create-only properties."""
        v = self.version_of(function)
        props = self.resources[v]["Properties"]
        return (v, tuple((p, json.dumps(props.get(p), sort_keys=True)) for p in create_only))


def as_list(x):
    return x if isinstance(x, list) else [x]


def managed_policy_name(arn):
    """The name of a managed policy from its ARN: a string or a Fn::Sub of one."""
    text = arn["Fn::Sub"] if isinstance(arn, dict) and isinstance(arn.get("Fn::Sub"), str) else arn
    text = text if isinstance(text, str) else json.dumps(text)
    return text.split(":policy/")[-1]


def arn_of(resource):
    return {"Fn::GetAtt": [resource, "Arn"]}


def norm_resource(r):
    if isinstance(r, dict) and list(r) == ["Fn::Sub"] and isinstance(r["Fn::Sub"], str):
        m = re.fullmatch(r"\$\{([A-Za-z0-9]+)\.Arn\}", r["Fn::Sub"])
        if m:
            return arn_of(m.group(1))
    return r


def allows(statements, action, resource):
    for s in statements:
        if s.get("Effect") != "Allow" or "NotAction" in s or "NotResource" in s:
            continue
        if any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(s.get("Action", []))) and \
                resource in [norm_resource(r) for r in as_list(s.get("Resource", []))]:
            return True
    return False


def like(value, pattern):
    """IAM's StringLike: `*` any run of characters, `?` one; case-sensitive."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.S) is not None


def condition_holds(condition, context):
    """Whether a statement's Condition holds for a request whose multivalued keys are `context`
    (e.g. {"dynamodb:LeadingKeys": ["install#..."]}). Only the operators this template uses are read;
    any other cannot be judged offline and fails the check."""
    tests = {"StringLike": lambda v, ps: any(like(v, p) for p in ps),
             "StringNotLike": lambda v, ps: not any(like(v, p) for p in ps),
             "StringEquals": lambda v, ps: v in ps}
    for op, pairs in (condition or {}).items():
        qualifier, _, base = op.rpartition(":")
        if base not in tests or qualifier not in ("", "ForAllValues", "ForAnyValue"):
            raise CheckFailed(f"a condition operator this check cannot evaluate: {op}")
        for key, wanted in pairs.items():
            wanted = [w if isinstance(w, str) else json.dumps(w) for w in as_list(wanted)]
            values = context.get(key)
            if qualifier == "ForAllValues":
                ok = all(tests[base](v, wanted) for v in values or [])
            elif qualifier == "ForAnyValue":
                ok = any(tests[base](v, wanted) for v in values or [])
            else:
                ok = values is not None and len(values) == 1 and tests[base](values[0], wanted)
            if not ok:
                return False
    return True


def permits(statements, action, resource, context):
    """Whether `statements` allow `action` on `resource` for a request with `context`: an Allow
    applies and no Deny does (Action, Resource and Condition read; NotAction and NotResource refused)."""
    def applies(s):
        if "NotAction" in s or "NotResource" in s:
            raise CheckFailed(f"a statement with NotAction or NotResource this check cannot evaluate: {s}")
        return (any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(s.get("Action", []))) and
                any(r == "*" or norm_resource(r) == resource for r in as_list(s.get("Resource", []))) and
                condition_holds(s.get("Condition"), context))
    allowed = any(s.get("Effect") == "Allow" and applies(s) for s in statements)
    denied = any(s.get("Effect") == "Deny" and applies(s) for s in statements)
    return allowed and not denied


def allows_action(statements, action):
    """Whether a statement allows `action` on any resource."""
    for s in statements:
        if s.get("Effect") != "Allow":
            continue
        if "NotAction" in s:
            if not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(s["NotAction"])):
                return True
        elif any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in as_list(s.get("Action", []))):
            return True
    return False


def references(node):
    """The logical ids `node` (a deployed piece of the template) names: Ref, Fn::GetAtt, ${...} of Fn::Sub."""
    found = set()
    if isinstance(node, list):
        for x in node:
            found |= references(x)
    elif isinstance(node, dict):
        for fn, args in node.items():
            if fn == "Ref" and isinstance(args, str) and not args.startswith("AWS::"):
                found.add(args)
            elif fn == "Fn::GetAtt":
                found.add(args[0] if isinstance(args, list) else args.split(".")[0])
            elif fn == "Fn::Sub":
                text, local = (args, {}) if isinstance(args, str) else (args[0], args[1])
                found |= {n.split(".")[0] for n in re.findall(r"\$\{([^!}][^}]*)\}", text)
                          if not n.startswith("AWS::") and n not in local}
                found |= references(local)
            else:
                found |= references(args)
    return found


def generated_by(name, function):
    """Whether `name` is `function` or one of the resources SAM generates for it."""
    return re.fullmatch(re.escape(function) + r"(Role|Version[0-9a-f]{10}|Alias\w+|Url|UrlPublicPermissions|"
                        r"URLInvokeAllowPublicAccess|DeploymentGroup)?", name) is not None


def canonical(d):
    """The deployed resources and outputs of `d`, as text that compares equal when they are alike (the
    names of the conditions that selected them left out)."""
    resources = {n: {k: v for k, v in r.items() if k != "Condition"} for n, r in d.resources.items()}
    return json.dumps({"resources": resources, "outputs": d.outputs}, sort_keys=True)


def rule_failures(rules, params, lists):
    """The AssertDescriptions of the template's Rules that `params` fail (CloudFormation's rule functions)."""
    def ev(n):
        if isinstance(n, (str, int, float)):
            return str(n)
        if isinstance(n, list):
            return [ev(x) for x in n]
        (fn, args), = n.items()
        if fn == "Ref":
            v = params.get(args, "")
            return v.split(",") if args in lists else v
        if fn == "Fn::Equals":
            return ev(args[0]) == ev(args[1])
        if fn == "Fn::Not":
            return not ev(args[0])
        if fn == "Fn::And":
            return all(ev(x) for x in args)
        if fn == "Fn::Or":
            return any(ev(x) for x in args)
        if fn == "Fn::Contains":
            return ev(args[1]) in ev(args[0])
        if fn == "Fn::EachMemberEquals":
            return all(x == ev(args[1]) for x in ev(args[0]))
        if fn == "Fn::EachMemberIn":
            return all(x in ev(args[1]) for x in ev(args[0]))
        raise CheckFailed(f"a rule function this check cannot evaluate: {fn}")
    failed = []
    for name, rule in (rules or {}).items():
        if "RuleCondition" in rule and not ev(rule["RuleCondition"]):
            continue
        failed += [a.get("AssertDescription", name) for a in rule.get("Assertions", []) if not ev(a["Assert"])]
    return failed


def parameters_in(node, template, _seen=None):
    """The parameters `node` (a piece of the source template) depends on: through Ref, Fn::Sub,
    the conditions of Fn::If and the keys of Fn::FindInMap."""
    params = template.get("Parameters", {})
    found = set()
    if isinstance(node, list):
        for x in node:
            found |= parameters_in(x, template)
    elif isinstance(node, dict):
        for fn, args in node.items():
            if fn == "Ref" and isinstance(args, str) and args in params:
                found.add(args)
            elif fn == "Fn::Sub":
                text = args if isinstance(args, str) else args[0]
                local = {} if isinstance(args, str) else args[1]
                found |= {n for n in re.findall(r"\$\{([^!}.][^}.]*)\}", text) if n in params and n not in local}
                if not isinstance(args, str):
                    found |= parameters_in(local, template)
            elif fn in ("Fn::If", "Condition") and args:
                name = args[0] if fn == "Fn::If" else args
                if isinstance(name, str) and name in template.get("Conditions", {}):
                    found |= parameters_in(template["Conditions"][name], template)
                found |= parameters_in(args[1:] if fn == "Fn::If" else [], template)
            else:
                found |= parameters_in(args, template)
    return found


def alternative(name, p):
    """Another valid value of parameter `name`."""
    default = str(p.get("Default", ""))
    if "AllowedValues" in p:
        others = [str(v) for v in p["AllowedValues"] if str(v) != default]
        return others[0]
    if p.get("Type") == "Number":
        v = int(float(default or 0)) + 1
        if "MaxValue" in p and v > int(p["MaxValue"]):
            v -= 2
        return str(v)
    if name == "AlarmTopicArn":
        return "arn:aws:sns:us-east-1:123456789012:alarms"
    if p.get("Type") == "CommaDelimitedList" and "AllowedPattern" in p:
        # Another list that the pattern accepts: one ID of the pattern's prefix ("subnet-", "sg-").
        m = re.match(r"\^\(?([a-z]+-)", p["AllowedPattern"])
        if m:
            return m.group(1) + "0fedcba9876543210"
    return (default or "value") + "-2"


def substitute(node, values):
    """`node` (a string or Fn::Sub) with the ${NAME}s of `values` replaced."""
    text = node["Fn::Sub"] if isinstance(node, dict) else node
    if not isinstance(text, str):
        raise CheckFailed(f"not a Fn::Sub of one string: {node}")
    return re.sub(r"\$\{([^!}][^}]*)\}", lambda m: values.get(m.group(1), m.group(0)), text)


def longest(p):
    if "AllowedValues" in p:
        return max((str(v) for v in p["AllowedValues"]), key=len)
    if p.get("Type") == "Number":
        return str(p["MaxValue"]) if "MaxValue" in p else None
    return "x" * int(p["MaxLength"]) if "MaxLength" in p else None


# ------------------------------------------------------------------ metric math

def metric_value(alarm, scenario):
    """The value an alarm compares with its threshold, with the metrics `scenario` says (a function
    of namespace, metric name and dimensions; None for no data)."""
    if "Metrics" not in alarm:
        return scenario(alarm.get("Namespace"), alarm.get("MetricName"), dims(alarm.get("Dimensions")))
    by_id = {m["Id"]: m for m in alarm["Metrics"]}
    cache = {}

    def value(i):
        if i not in cache:
            m = by_id[i]
            if "MetricStat" in m:
                met = m["MetricStat"]["Metric"]
                cache[i] = scenario(met.get("Namespace"), met.get("MetricName"), dims(met.get("Dimensions")))
            else:
                cache[i] = expression(m["Expression"], value)
        return cache[i]
    returned = [m["Id"] for m in alarm["Metrics"] if m.get("ReturnData", True)]
    if len(returned) != 1:
        raise CheckFailed(f"the alarm returns {len(returned)} series, not 1")
    return value(returned[0])


def dims(ds):
    return tuple(sorted((d["Name"], json.dumps(d["Value"], sort_keys=True)) for d in (ds or [])))


def expression(text, value):
    """CloudWatch metric math, as far as these alarms use it: + - * /, comparisons, FILL, IF."""
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return value(n.id)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            v = ev(n.operand)
            return None if v is None else -v
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if a is None or b is None:
                return None
            ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                   ast.Div: lambda: a / b if b else None}
            return ops[type(n.op)]()
        if isinstance(n, ast.Compare) and len(n.ops) == 1:
            a, b = ev(n.left), ev(n.comparators[0])
            if a is None or b is None:
                return None
            ops = {ast.Gt: a > b, ast.GtE: a >= b, ast.Lt: a < b, ast.LtE: a <= b, ast.Eq: a == b}
            return 1 if ops[type(n.ops[0])] else 0
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            f = n.func.id.upper()
            if f == "FILL":
                v = ev(n.args[0])
                return ev(n.args[1]) if v is None else v
            if f == "IF":
                c = ev(n.args[0])
                return ev(n.args[1]) if c else ev(n.args[2])
        raise CheckFailed(f"metric math this check cannot evaluate: {text!r}")
    return ev(ast.parse(text, mode="eval"))


# ------------------------------------------------------------------ the checks

class Checks:
    """verbosity: 2 prints every check, 1 the failures, 0 nothing."""

    def __init__(self, template, verbosity=2, baseline=None):
        self.template = template
        self.verbosity = verbosity
        self.baseline = baseline  # another template whose deployed stack ManagedInstances=false must equal
        self.failures = {}  # check id -> its first failure message
        self.modes = [str(v) for v in template["Parameters"]["Mode"]["AllowedValues"]]
        switch = template["Parameters"].get(SWITCH)
        self.lmi_values = [str(v) for v in switch["AllowedValues"]] if switch else ["false"]
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", "AWS::Lambda::Version").schema
        self.create_only = [p.split("/")[-1] for p in schema.get("createOnlyProperties", [])]
        self._deployed = {}

    def lmi(self, value):
        """The parameters ManagedInstances=`value` is checked with."""
        if value != "true":
            return {SWITCH: value} if SWITCH in self.template["Parameters"] else {}
        return {SWITCH: "true", "ManagedInstancesSubnetIds": LMI_SUBNETS,
                "ManagedInstancesSecurityGroupIds": LMI_SECURITY_GROUPS}

    def functions(self, value):
        """The ingress and the worker for ManagedInstances=`value`."""
        return (MANAGED_INGRESS, MANAGED_WORKER) if value == "true" else (INGRESS, WORKER)

    def lmi_parameters(self):
        """The ManagedInstances* parameters but the switch itself."""
        return sorted(n for n in self.template["Parameters"] if n.startswith(SWITCH) and n != SWITCH)

    def deployed(self, overrides=None, code="code-1"):
        params = parameters(self.template, overrides)
        key = (json.dumps(params, sort_keys=True), code)
        if key not in self._deployed:
            self._deployed[key] = Deployed(self.template, params, code)
        return self._deployed[key]

    def run(self, cid, what, fn, *args):
        try:
            detail = fn(*args)
            if self.verbosity >= 2:
                print(f"ok      {cid:<16} {what}" + (f": {detail}" if detail else ""))
        except CheckFailed as e:
            self.failures.setdefault(cid, str(e))
            if self.verbosity >= 1:
                print(f"FAILED  {cid:<16} {what}: {e}")

    def all(self):
        for mode in self.modes:
            for lmi in self.lmi_values:
                tag = f"[{mode}{', LMI' if lmi == 'true' else ''}]"
                try:
                    d = self.deployed({"Mode": mode, **self.lmi(lmi)})
                except CheckFailed as e:
                    self.failures.setdefault("translate", str(e))
                    if self.verbosity >= 1:
                        print(f"FAILED  {'translate':<16} {tag} SAM's translator takes the template: {e}")
                    continue
                self.run("ingress-role", f"{tag} the ingress may PutItem and UpdateItem the ledger and SendMessage to the queue",
                         self.ingress_role, d)
                self.run("queue-worker", f"{tag} the queue, its dead-letter queue and the worker exist",
                         self.queue_worker, d)
                self.run("ingress-env", f"{tag} the ingress's environment (each version's) says the mode",
                         self.ingress_env, d, mode)
                self.run("mapping", f"{tag} the worker's explicit SQS mapping invokes its live alias",
                         self.mapping, d)
                self.run("worker-role", f"{tag} the worker may put and update the ledger, and receive, delete and extend on its queue only",
                         self.worker_role, d)
                self.run("no-sqs-star", f"{tag} no role allows SQS actions on \"*\" (managed policy or statement)",
                         self.no_sqs_star, d)
                self.run("worker-alarm", f"{tag} the new worker version's failures roll its canary back",
                         self.worker_alarm, d, mode)
                self.run("failure-rate", f"{tag} the Slack failure rate counts each event once",
                         self.failure_rate, d)
                self.run("refs-exist", f"{tag} every reference names a resource that exists", self.refs_exist, d)
                self.run("alarm-targets", f"{tag} each deployment's alarms watch its own function's new version",
                         self.alarm_targets, d)
                if lmi == "true":
                    self.run("lmi-on", f"{tag} both functions on one capacity provider in the given subnets",
                             self.lmi_on, d)
                    self.run("operator-role", f"{tag} the operator role is Lambda's only, with the documented policy only",
                             self.operator_role, d)
                else:
                    self.run("lmi-off", f"{tag} no Lambda Managed Instances, and nothing of theirs changes the stack",
                             self.lmi_off, d)
        if "true" in self.lmi_values:
            self.run("lmi-on", "[synchronous, LMI] other values: no security groups, x86_64, 8 at once, 4 GiB per vCPU",
                     self.lmi_on_values)
            self.run("lmi-rules", "the Rules refuse ManagedInstances=true without subnets, and only that",
                     self.lmi_rules)
            self.run("twins", "each managed twin is its ordinary twin but for what Lambda Managed Instances change",
                     self.twins)
        if self.baseline is not None:
            self.run("lmi-off", "[every Mode] ManagedInstances=false deploys what the baseline template deploys",
                     self.same_as_baseline)
        for lmi in self.lmi_values:
            tag = f"[{self.modes[0]}{', LMI' if lmi == 'true' else ''}]"
            self.run("own-items", f"{tag} the roles touch this app's installation, OAuth-state and pacing items, "
                     "no other app's", self.own_items, lmi)
        self.run("mode-publishes", "changing Mode alone publishes a new ingress version", self.mode_publishes)
        self.run("no-spurious", "changing LogRetentionDays, or any parameter no version captures, publishes none",
                 self.no_spurious)
        self.run("version-params", "a parameter publishes a version exactly when that version captures it",
                 self.version_params)
        self.run("code-publishes", "a code change publishes new versions of both functions", self.code_publishes)
        self.run("description-len", "the version descriptions fit 256 characters", self.description_len)
        return self.failures

    # each returns a short detail, or raises CheckFailed

    def ingress_role(self, d):
        st = d.statements(d.role_of(d.ingress))
        missing = [f"{a} on {r}" for a, r in (("dynamodb:PutItem", LEDGER), ("dynamodb:UpdateItem", LEDGER),
                                               ("sqs:SendMessage", QUEUE))
                   if not allows(st, a, arn_of(r))]
        if missing:
            raise CheckFailed("the ingress's role does not allow " + " nor ".join(missing) +
                              ": a version of the other mode would fail while a switch shifts traffic")

    def queue_worker(self, d):
        for name, rtype in ((QUEUE, "AWS::SQS::Queue"), (DLQ, "AWS::SQS::Queue"), (d.worker, "AWS::Lambda::Function")):
            if d.resources.get(name, {}).get("Type") != rtype:
                raise CheckFailed(f"no {rtype} {name}: what old versions queued during a switch would not be answered")
        redrive = d.props(QUEUE).get("RedrivePolicy", {})
        if redrive.get("deadLetterTargetArn") != arn_of(DLQ):
            raise CheckFailed(f"{QUEUE} does not redrive to {DLQ}: {redrive}")
        env = d.props(d.worker).get("Environment", {}).get("Variables", {})
        if env.get("SLACK_ONCE_ROLE") != "worker" or "DEDUP_TABLE" not in env:
            raise CheckFailed(f"{d.worker} is not configured as a worker with the ledger: {sorted(env)}")
        if env.get("WORK_QUEUE_URL") != {"Ref": QUEUE}:
            raise CheckFailed(f"{d.worker} has no WORK_QUEUE_URL of {QUEUE}: a record released for a passing "
                              f"failure would wait out the visibility timeout instead of its backoff")

    def ingress_env(self, d, mode):
        env = d.props(d.ingress).get("Environment", {}).get("Variables", {})
        want = {"DEDUP_TABLE": True, "WORK_QUEUE_URL": mode == "deferred"}
        wrong = [f"{k} {'missing' if w else 'set'}" for k, w in want.items() if (k in env) != w]
        if wrong:
            raise CheckFailed(", ".join(wrong))
        return "sets " + ", ".join(k for k, w in want.items() if w)

    def mapping(self, d):
        sam_sqs = [f"{n}.{e}" for n, r in self.template["Resources"].items()
                   if r.get("Type") == "AWS::Serverless::Function"
                   for e, ev in (r.get("Properties", {}).get("Events") or {}).items() if ev.get("Type") == "SQS"]
        if sam_sqs:
            raise CheckFailed(f"SAM SQS event {', '.join(sam_sqs)}: SAM attaches AWSLambdaSQSQueueExecutionRole with it")
        explicit = [n for n, r in self.template["Resources"].items() if r.get("Type") == "AWS::Lambda::EventSourceMapping"]
        maps = [(n, r["Properties"]) for n, r in d.of_type("AWS::Lambda::EventSourceMapping").items()
                if r["Properties"].get("EventSourceArn") == arn_of(QUEUE)]
        if len(maps) != 1 or maps[0][0] not in explicit:
            raise CheckFailed(f"want one explicit AWS::Lambda::EventSourceMapping on {QUEUE}, found {[n for n, _ in maps]}")
        name, m = maps[0]
        alias = d.alias_of(d.worker)
        if m.get("FunctionName") != {"Ref": alias}:
            raise CheckFailed(f"{name} invokes {m.get('FunctionName')}, not the alias {alias}: CodeDeploy's shift would not apply")
        if "CodeDeployLambdaAliasUpdate" not in d.resources[alias].get("UpdatePolicy", {}):
            raise CheckFailed(f"{alias} has no CodeDeployLambdaAliasUpdate: no canary")
        if "ReportBatchItemFailures" not in m.get("FunctionResponseTypes", []):
            raise CheckFailed(f"{name} lacks FunctionResponseTypes ReportBatchItemFailures")
        want = {"BatchSize": d.params["WorkerBatchSize"],
                "MaximumConcurrency": d.params["WorkerMaxConcurrency"]}
        got = {"BatchSize": str(m.get("BatchSize")),
               "MaximumConcurrency": str(m.get("ScalingConfig", {}).get("MaximumConcurrency"))}
        if got != want:
            raise CheckFailed(f"{name}: {got}, want {want}")
        return f"{name} -> {alias}"

    def worker_role(self, d):
        st = d.statements(d.role_of(d.worker))
        missing = [a for a in WORKER_SQS_ACTIONS if not allows(st, a, arn_of(QUEUE))]
        if missing:
            raise CheckFailed(f"the worker's role does not allow {', '.join(missing)} on {QUEUE}")
        missing = [a for a in LEDGER_ACTIONS if not allows(st, a, arn_of(LEDGER))]
        if missing:
            raise CheckFailed(f"the worker's role does not allow {', '.join(missing)} on {LEDGER}: its claims fail")

    def own_items(self, lmi):
        try:
            d = self.deployed({"Mode": self.modes[0], "SlackClientId": OWN_CLIENT, **self.lmi(lmi)})
        except CheckFailed as e:
            raise CheckFailed(f"with SlackClientId={OWN_CLIENT}: {e}") from e
        wrong = []
        for function in (d.ingress, d.worker):
            st = d.statements(d.role_of(function))

            def may(action, key):
                return permits(st, action, arn_of(LEDGER), {"dynamodb:LeadingKeys": [key]})

            for kinds, whose, want in ((app_keys(OWN_CLIENT), "this app's", True),
                                       (PREVIOUS_RELEASE_KEYS, "the previous release's", True),
                                       (app_keys(OTHER_CLIENT), "another app's", False)):
                for kind, keys in kinds.items():
                    actions = ITEM_ACTIONS + (["dynamodb:DeleteItem"] if kind == "installation" else [])
                    for key in keys:
                        for action in actions:
                            if may(action, key) != want:
                                wrong.append(f"{function} {'may not' if want else 'may'} {action} {whose} "
                                             f"{kind} {key}")
            for key in LEDGER_KEYS:
                for action in ITEM_ACTIONS:
                    if not may(action, key):
                        wrong.append(f"{function} may not {action} the ledger's {key}")
                if may("dynamodb:DeleteItem", key):
                    wrong.append(f"{function} may DeleteItem the ledger's {key}")
        if wrong:
            raise CheckFailed("; ".join(wrong[:6]) + (f" (and {len(wrong) - 6} more)" if len(wrong) > 6 else ""))
        return f"{OWN_CLIENT}'s items, not {OTHER_CLIENT}'s, for both roles"

    def no_sqs_star(self, d):
        problems = []
        for role, r in d.of_type("AWS::IAM::Role").items():
            for arn in r["Properties"].get("ManagedPolicyArns", []):
                name = managed_policy_name(arn)
                if name not in KNOWN_MANAGED:
                    problems.append(f"{role} has the managed policy {name}, whose statements this check cannot "
                                    "read (AWS's SQS ones, AWSLambdaSQSQueueExecutionRole among them, allow SQS "
                                    "actions on \"*\"): allow SQS in an explicit statement on the queue instead")
            for s in d.statements(role):
                if s.get("Effect") != "Allow":
                    continue
                actions = SQS_ACTIONS if "NotAction" in s else as_list(s.get("Action", []))
                sqs = [a for a in actions if any(fnmatch.fnmatchcase(x.lower(), a.lower()) for x in SQS_ACTIONS)]
                wide = "NotResource" in s or any(isinstance(x, str) and "*" in x or
                                                 isinstance(x, dict) and "*" in json.dumps(x)
                                                 for x in as_list(s.get("Resource", [])))
                if sqs and wide:
                    problems.append(f"{role} allows {', '.join(sqs)} on {s.get('Resource', s.get('NotResource'))}")
        if problems:
            raise CheckFailed("; ".join(problems))

    def worker_alarm(self, d, mode):
        alarm = d.resources.get(WORKER_ALARM)
        if not alarm or alarm["Type"] != "AWS::CloudWatch::Alarm":
            raise CheckFailed(f"no alarm {WORKER_ALARM}")
        a = alarm["Properties"]
        group = d.resources[d.alias_of(d.worker)].get("UpdatePolicy", {}).get("CodeDeployLambdaAliasUpdate", {}) \
            .get("DeploymentGroupName", {}).get("Ref")
        config = d.props(group).get("AlarmConfiguration", {}) if group in d.resources else {}
        if not config.get("Enabled") or {"Name": {"Ref": WORKER_ALARM}} not in config.get("Alarms", []):
            raise CheckFailed(f"{WORKER_ALARM} is not among the alarms of the worker's deployment ({group}): "
                              "a bad worker version would not roll back")
        new = json.dumps({"Fn::GetAtt": [d.version_of(d.worker), "Version"]}, sort_keys=True)
        old = json.dumps("1", sort_keys=True)
        threshold = float(a["Threshold"])
        if a.get("ComparisonOperator") != "GreaterThanThreshold":
            raise CheckFailed(f"ComparisonOperator {a.get('ComparisonOperator')}, want GreaterThanThreshold")

        def fires(metric, version):
            def scenario(ns, name, ds):
                return threshold + 1 if (ns, name, ds) == ("SlackOnce", metric, (("FunctionVersion", version),)) else None
            v = metric_value(a, scenario)
            return v is not None and v > threshold
        counted = ["WorkerErrors", "DeadLettered"] + (["Failed"] if mode == "deferred" else [])
        for metric in counted:
            if not fires(metric, new):
                raise CheckFailed(f"{metric} of the new worker version above the threshold does not fire it")
        for metric in ["WorkerErrors", "DeadLettered", "Failed"]:
            if fires(metric, old):
                raise CheckFailed(f"{metric} of another version fires it")
        if mode != "deferred" and fires("Failed", new):
            raise CheckFailed("in synchronous mode it counts Failed, which an ingress version of the same "
                              "number also emits")
        periods = int(a.get("EvaluationPeriods", 1))
        period = max(int(m.get("MetricStat", {}).get("Period", 60)) for m in a.get("Metrics", [{}]))
        if periods * period > 300:
            raise CheckFailed(f"it decides after {periods * period} s, later than a 5-minute canary")
        return f"{' + '.join(counted)} of the new version, > {a['Threshold']} for {periods} x {period} s, in {group}"

    def failure_rate(self, d):
        a = d.props(RATE_ALARM)
        # (metrics, the failure rate they mean): each deferred event is one Deliveries of outcome
        # Queued at the ingress and one QueuedEvents at the worker.
        cases = [
            ("4 synchronous events, 1 failed", {"Deliveries": 4, "SlackErrorsPermanent": 1}, 0.25),
            ("4 deferred events, 1 failed", {"Deliveries": 4, "Queued": 4, "QueuedEvents": 4,
                                             "SlackErrorsPermanent": 1}, 0.25),
            ("2 synchronous and 2 deferred events (a switch), 1 failed",
             {"Deliveries": 4, "Queued": 2, "QueuedEvents": 2, "SlackErrorsTransient": 1}, 0.25),
        ]
        for what, metrics, want in cases:
            got = metric_value(a, lambda ns, name, ds: metrics.get(name) if ns == "SlackOnce" and not ds else None)
            if got is None or abs(got - want) > 1e-9:
                raise CheckFailed(f"{what}: rate {got}, want {want} (is a deferred event counted twice?)")

    def refs_exist(self, d):
        missing = set()
        for where, node in list(d.resources.items()) + [("Outputs." + k, v) for k, v in d.outputs.items()]:
            for name in references(node) - set(d.resources) - set(d.params):
                missing.add(f"{where} -> {name}")
            for name in as_list(d.resources.get(where, {}).get("DependsOn", [])):
                if name not in d.resources:
                    missing.add(f"{where} DependsOn {name}")
        if missing:
            raise CheckFailed("references to resources that do not exist for these parameters (CloudFormation "
                              "refuses the template): " + ", ".join(sorted(missing)))

    def alarm_targets(self, d):
        details = []
        for f in (d.ingress, d.worker):
            alias = d.alias_of(f)
            group = d.resources[alias].get("UpdatePolicy", {}).get("CodeDeployLambdaAliasUpdate", {}) \
                .get("DeploymentGroupName", {}).get("Ref")
            if group not in d.resources:
                raise CheckFailed(f"{alias} has no deployment group of this stack: no canary")
            own = {f, d.version_of(f), alias}
            for a in d.props(group).get("AlarmConfiguration", {}).get("Alarms", []):
                name = a.get("Name", {}).get("Ref") if isinstance(a.get("Name"), dict) else None
                if name not in d.resources:
                    raise CheckFailed(f"{group} watches {a}, not an alarm of this stack")
                lambdas = {n for n in references(d.props(name)) if n in d.resources and
                           d.resources[n]["Type"] in ("AWS::Lambda::Function", "AWS::Lambda::Version", "AWS::Lambda::Alias")}
                if lambdas - own:
                    raise CheckFailed(f"{name}, an alarm of {f}'s deployment, watches {sorted(lambdas - own)}: another "
                                      "function's, so a bad version of this one would not roll back")
                if d.version_of(f) not in lambdas:
                    raise CheckFailed(f"{name}, an alarm of {f}'s deployment, does not watch its new version "
                                      f"{d.version_of(f)}")
            details.append(f"{group}: {f}")
        return ", ".join(details)

    def lmi_off(self, d):
        problems = []
        if d.of_type("AWS::Lambda::CapacityProvider"):
            problems.append(f"capacity providers {sorted(d.of_type('AWS::Lambda::CapacityProvider'))}")
        problems += [f"{n} has CapacityProviderConfig" for n, r in d.of_type("AWS::Lambda::Function").items()
                     if "CapacityProviderConfig" in r["Properties"]]
        problems += [f"{n} holds {OPERATOR_POLICY}" for n, r in d.of_type("AWS::IAM::Role").items()
                     if OPERATOR_POLICY in map(managed_policy_name, r["Properties"].get("ManagedPolicyArns", []))]
        problems += [f"{n} exists" for n in sorted(d.resources) if any(generated_by(n, t) for t in TWINS.values())]
        if problems:
            raise CheckFailed(f"with {SWITCH}=false: " + "; ".join(problems))
        if (d.ingress, d.worker) != (INGRESS, WORKER):
            raise CheckFailed(f"the functions are {d.ingress} and {d.worker}, not {INGRESS} and {WORKER}")
        base = canonical(d)
        for name in self.lmi_parameters():
            alt = alternative(name, self.template["Parameters"][name])
            if canonical(self.deployed({**d.params, name: alt})) != base:
                raise CheckFailed(f"{name}={alt} changes the deployed stack although {SWITCH}=false: a stack that "
                                  "leaves Lambda Managed Instances off would change")
        return "no capacity provider or operator role; unchanged by " + ", ".join(self.lmi_parameters())

    def lmi_on(self, d):
        p = d.params
        cps = d.of_type("AWS::Lambda::CapacityProvider")
        if len(cps) != 1:
            raise CheckFailed(f"{len(cps)} capacity providers, not 1")
        (cp, r), = cps.items()
        props = r["Properties"]
        vpc = props.get("VpcConfig", {})
        want_subnets = p["ManagedInstancesSubnetIds"].split(",")
        want_groups = [g for g in p["ManagedInstancesSecurityGroupIds"].split(",") if g]
        arch = [p["Architecture"]]
        got = {"SubnetIds": vpc.get("SubnetIds"), "SecurityGroupIds": vpc.get("SecurityGroupIds"),
               "Architectures": props.get("InstanceRequirements", {}).get("Architectures"),
               "MaxVCpuCount": str(props.get("CapacityProviderScalingConfig", {}).get("MaxVCpuCount"))}
        want = {"SubnetIds": want_subnets, "SecurityGroupIds": want_groups, "Architectures": arch,
                "MaxVCpuCount": p["ManagedInstancesMaxVCpuCount"]}
        wrong = [f"{k} {got[k]} (want {want[k]})" for k in want if got[k] != want[k]]
        if wrong:
            raise CheckFailed(f"{cp}: " + ", ".join(wrong))
        role = props.get("PermissionsConfig", {}).get("CapacityProviderOperatorRoleArn")
        if not (isinstance(role, dict) and "Fn::GetAtt" in role and
                d.resources.get(role["Fn::GetAtt"][0], {}).get("Type") == "AWS::IAM::Role"):
            raise CheckFailed(f"{cp}'s operator role is not a role of this stack: {role}")
        ratio = p["ManagedInstancesMemoryPerVCpu"]
        for f in (d.ingress, d.worker):
            if f not in TWINS.values():
                raise CheckFailed(f"{f}, an ordinary function, exists with {SWITCH}=true")
            fp = d.props(f)
            c = fp.get("CapacityProviderConfig", {}).get("LambdaManagedInstancesCapacityProviderConfig", {})
            got = {"CapacityProviderArn": c.get("CapacityProviderArn"),
                   "PerExecutionEnvironmentMaxConcurrency": str(c.get("PerExecutionEnvironmentMaxConcurrency")),
                   "ExecutionEnvironmentMemoryGiBPerVCpu": str(c.get("ExecutionEnvironmentMemoryGiBPerVCpu")),
                   "MemorySize": str(fp.get("MemorySize")), "Architectures": fp.get("Architectures")}
            want = {"CapacityProviderArn": arn_of(cp),
                    "PerExecutionEnvironmentMaxConcurrency": p["ManagedInstancesMaxConcurrency"],
                    "ExecutionEnvironmentMemoryGiBPerVCpu": ratio,
                    # one vCPU per execution environment, at least 2 GB
                    "MemorySize": str(max(LMI_MIN_MEMORY, int(float(ratio) * 1024))), "Architectures": arch}
            wrong = [f"{k} {got[k]} (want {want[k]})" for k in want if got[k] != want[k]]
            wrong += [f"{k} set" for k in ("ReservedConcurrentExecutions", "VpcConfig", "ProvisionedConcurrencyConfig")
                      if k in fp]
            if wrong:
                raise CheckFailed(f"{f}: " + ", ".join(wrong))
        left = sorted(n for n in d.resources if any(generated_by(n, o) for o in TWINS))
        if left:
            raise CheckFailed(f"resources of the ordinary functions exist with {SWITCH}=true: {', '.join(left)}")
        alias = d.alias_of(d.ingress)
        urls = d.of_type("AWS::Lambda::Url")
        if [u["Properties"].get("TargetFunctionArn") for u in urls.values()] != [{"Ref": alias}]:
            raise CheckFailed(f"the Function URLs {sorted(urls)} are not one on {alias}")
        (url,), out = urls.keys(), d.outputs
        if references(out.get("SlackRequestUrl", {}).get("Value")) != {url} or \
                out.get("FunctionAlias", {}).get("Value") != {"Ref": alias}:
            raise CheckFailed(f"the outputs SlackRequestUrl and FunctionAlias are not {url}'s and {alias}")
        return (f"{cp} in {len(want_subnets)} subnets, {len(want_groups)} security groups, {arch[0]}, "
                f"MaxVCpuCount {p['ManagedInstancesMaxVCpuCount']}; {d.ingress} and {d.worker}: "
                f"{p['ManagedInstancesMaxConcurrency']} at once, {ratio} GiB per vCPU; URL {url}")

    def lmi_on_values(self):
        other = [{"ManagedInstancesSecurityGroupIds": ""},
                 {"Architecture": "x86_64", "ManagedInstancesMaxConcurrency": "8", "ManagedInstancesMemoryPerVCpu": "4",
                  "ManagedInstancesMaxVCpuCount": "100", "ManagedInstancesSubnetIds": "subnet-0fedcba9876543210"}]
        for o in other:
            self.lmi_on(self.deployed({"Mode": self.modes[0], **self.lmi("true"), **o}))
        return "; ".join(", ".join(f"{k}={v or '(empty)'}" for k, v in o.items()) for o in other)

    def operator_role(self, d):
        (cp, r), = d.of_type("AWS::Lambda::CapacityProvider").items()
        role = r["Properties"]["PermissionsConfig"]["CapacityProviderOperatorRoleArn"]["Fn::GetAtt"][0]
        props = d.props(role)
        trust = as_list(props.get("AssumeRolePolicyDocument", {}).get("Statement", []))
        lambda_only = [{"Service": "lambda.amazonaws.com"}, {"Service": ["lambda.amazonaws.com"]}]
        bad = [st for st in trust if st.get("Effect") != "Allow" or "NotPrincipal" in st or "NotAction" in st or
               st.get("Principal") not in lambda_only or as_list(st.get("Action")) != ["sts:AssumeRole"]]
        if not trust or bad:
            raise CheckFailed(f"{role}'s trust policy is not lambda.amazonaws.com's sts:AssumeRole alone: {bad or trust}")
        policies = [managed_policy_name(a) for a in props.get("ManagedPolicyArns", [])]
        if policies != [OPERATOR_POLICY]:
            raise CheckFailed(f"{role} holds the managed policies {policies}, not {OPERATOR_POLICY} alone")
        if d.statements(role):
            raise CheckFailed(f"{role} has statements of its own beyond {OPERATOR_POLICY}: {d.statements(role)}")
        for fn in d.of_type("AWS::Lambda::Function"):
            fr = d.role_of(fn)
            if fr == role:
                raise CheckFailed(f"{fn} runs with the operator role {role}")
            if OPERATOR_POLICY in map(managed_policy_name, d.props(fr).get("ManagedPolicyArns", [])):
                raise CheckFailed(f"{fn}'s role {fr} holds {OPERATOR_POLICY}")
            rights = [a for a in ("ec2:RunInstances", "ec2:CreateNetworkInterface", "iam:PassRole")
                      if allows_action(d.statements(fr), a)]
            if rights:
                raise CheckFailed(f"{fn}'s role {fr} allows {', '.join(rights)}: the function needs none of it")
        others = [n for n, x in d.of_type("AWS::IAM::Role").items() if n != role and
                  OPERATOR_POLICY in map(managed_policy_name, x["Properties"].get("ManagedPolicyArns", []))]
        if others:
            raise CheckFailed(f"{others} also hold {OPERATOR_POLICY}")
        return f"{role}: trusted by lambda.amazonaws.com only; {OPERATOR_POLICY} only; used by {cp} alone"

    def lmi_rules(self):
        rules = self.template.get("Rules", {})
        lists = {n for n, p in self.template["Parameters"].items() if p.get("Type") == "CommaDelimitedList"}
        cases = [
            (f"{SWITCH}=true without subnets", {SWITCH: "true", "ManagedInstancesSubnetIds": ""}, False),
            (f"{SWITCH}=true with an empty entry", {SWITCH: "true", "ManagedInstancesSubnetIds":
                                                    LMI_SUBNETS.split(",")[0] + ",," + LMI_SUBNETS.split(",")[1]}, False),
            (f"{SWITCH}=true with subnets", {SWITCH: "true", "ManagedInstancesSubnetIds": LMI_SUBNETS}, True),
            (f"{SWITCH}=true with subnets and security groups", self.lmi("true"), True),
            (f"{SWITCH}=false without subnets", {SWITCH: "false"}, True),
        ]
        for what, overrides, accepted in cases:
            failed = rule_failures(rules, parameters(self.template, overrides), lists)
            if accepted and failed:
                raise CheckFailed(f"{what}: refused ({'; '.join(failed)})")
            if not accepted and not failed:
                raise CheckFailed(f"{what}: accepted, so the deploy would fail later, at the capacity provider, "
                                  "without saying why")
            if not accepted and not any("ManagedInstancesSubnetIds" in m for m in failed):
                raise CheckFailed(f"{what}: refused, but the message does not name ManagedInstancesSubnetIds: {failed}")
        return "; ".join(f"{w}: {'accepted' if a else 'refused'}" for w, _, a in cases)

    def twins(self):
        res = self.template["Resources"]
        for o, m in TWINS.items():
            if m not in res:
                raise CheckFailed(f"no {m}, {o}'s twin on Lambda Managed Instances")
            po, pm = res[o].get("Properties", {}), res[m].get("Properties", {})
            diff = sorted(k for k in set(po) | set(pm) if k not in TWIN_DIFFERENCES and
                          json.dumps(po.get(k), sort_keys=True) != json.dumps(pm.get(k), sort_keys=True))
            if diff or res[o].get("Metadata") != res[m].get("Metadata") or res[o]["Type"] != res[m]["Type"]:
                raise CheckFailed(f"{m} is not {o} on Lambda Managed Instances: they differ in "
                                  f"{', '.join(diff) or 'Type or Metadata'}")
            do, dm = (x.get("VersionDescription", {}) for x in (po, pm))
            do, dm = (x.get("Fn::Sub") if isinstance(x, dict) else x for x in (do, dm))
            if not (isinstance(do, str) and isinstance(dm, str) and dm.startswith(do + " ")):
                raise CheckFailed(f"{m}'s VersionDescription does not extend {o}'s: {dm!r}")
        return ", ".join(f"{m} = {o} but {', '.join(sorted(TWIN_DIFFERENCES))}" for o, m in TWINS.items())

    def same_as_baseline(self):
        for mode in self.modes:
            a = self.deployed({"Mode": mode, **self.lmi("false")})
            b = Deployed(self.baseline, parameters(self.baseline, {"Mode": mode}))
            ra, rb = json.loads(canonical(a))["resources"], json.loads(canonical(b))["resources"]
            diff = sorted(n for n in set(ra) | set(rb) if ra.get(n) != rb.get(n))
            if diff:
                raise CheckFailed(f"Mode={mode}: these resources differ from the baseline's: {', '.join(diff)}")
            if json.loads(canonical(a))["outputs"] != json.loads(canonical(b))["outputs"]:
                raise CheckFailed(f"Mode={mode}: the outputs differ from the baseline's")
        return f"{len(ra)} resources and the outputs alike for every Mode"

    def mode_publishes(self):
        lines = []
        for lmi in self.lmi_values:
            ingress = self.functions(lmi)[0]
            ids = {m: self.deployed({"Mode": m, **self.lmi(lmi)}).identity(ingress, self.create_only)
                   for m in self.modes}
            for a in self.modes:
                for b in self.modes:
                    if a < b and ids[a] == ids[b]:
                        raise CheckFailed(f"Mode={a} and Mode={b} give the same {ingress} version {ids[a][0]} "
                                          "with the same create-only properties: the alias would keep the old mode")
            for m in self.modes:
                v, props = ids[m]
                desc = dict(props).get("Description")
                lines.append(f"Mode={m}: {v}, Description {desc}")
            same = len({ids[m][0] for m in self.modes}) == 1
            lines[-1] += (" (same logical id, but Description is create-only (CloudFormation replaces the version))"
                          if same else " (the logical id changes)")
        return "; ".join(lines)

    def no_spurious(self):
        params = self.template["Parameters"]
        checked = []
        for lmi in self.lmi_values:
            fns = self.functions(lmi)
            base = self.deployed(self.lmi(lmi))
            captured = set().union(*(self.captured(f) for f in fns))
            # The switch replaces the functions by their twins (lmi-off, lmi-on): not a version of theirs.
            names = ["LogRetentionDays"] + sorted(n for n in params
                                                  if n not in captured and n not in ("LogRetentionDays", SWITCH))
            for name in names:
                if "Default" not in params[name]:
                    continue
                alt = alternative(name, params[name])
                changed = self.deployed({**self.lmi(lmi), name: alt})
                for f in fns:
                    if base.identity(f, self.create_only) != changed.identity(f, self.create_only):
                        raise CheckFailed(f"{name}={alt} alone makes CloudFormation publish a new {f} version (its "
                                          "logical id or a create-only property changes) with nothing changed in it: "
                                          "such a deploy fails")
            checked.append(f"{SWITCH}={lmi}: " + ", ".join(names))
        return "same versions after changing " + "; ".join(checked)

    def captured(self, function):
        """The parameters the version's configuration depends on (not the ones SAM's hash resolves)."""
        props = self.template["Resources"][function]["Properties"]
        glob = (self.template.get("Globals") or {}).get("Function") or {}
        sam_names = {"Tracing": "TracingConfig", "DeadLetterQueue": "DeadLetterConfig"}
        found = set()
        for k in set(props) | set(glob):
            if sam_names.get(k, k) in VERSION_CAPTURED:
                found |= parameters_in(props.get(k, glob.get(k)), self.template)
        return found

    def described(self, function):
        desc = self.template["Resources"][function]["Properties"].get("VersionDescription")
        return parameters_in(desc, self.template) if desc is not None else set()

    def version_params(self):
        details = []
        for lmi in self.lmi_values:
            base = self.deployed(self.lmi(lmi))
            for f in self.functions(lmi):
                captured, described = self.captured(f), self.described(f)
                if captured != described:
                    raise CheckFailed(
                        f"{f}'s configuration depends on {sorted(captured)} but its VersionDescription names "
                        f"{sorted(described)}: " +
                        "; ".join(x for x in (
                            ("a change of " + ", ".join(sorted(captured - described)) + " would publish nothing, and "
                             "the alias would keep the old configuration") if captured - described else "",
                            ("a change of " + ", ".join(sorted(described - captured)) + " would publish a version "
                             "with nothing changed, which fails the deploy") if described - captured else "") if x))
                for name, p in self.template["Parameters"].items():
                    if "Default" not in p or name == SWITCH:
                        continue
                    alt = alternative(name, p)
                    moved = base.identity(f, self.create_only) != \
                        self.deployed({**self.lmi(lmi), name: alt}).identity(f, self.create_only)
                    if moved != (name in captured):
                        raise CheckFailed(f"{name}={alt} {'publishes' if moved else 'does not publish'} a new {f} "
                                          f"version, but {f}'s configuration {'does not depend' if moved else 'depends'} "
                                          "on it")
                details.append(f"{f}: {', '.join(sorted(captured))}")
        return "; ".join(details)

    def code_publishes(self):
        moves = []
        for lmi in self.lmi_values:
            a, b = self.deployed(self.lmi(lmi)), self.deployed(self.lmi(lmi), code="code-2")
            for f in self.functions(lmi):
                if a.identity(f, self.create_only) == b.identity(f, self.create_only):
                    raise CheckFailed(f"new code keeps {f}'s version {a.version_of(f)}: the alias would keep the old "
                                      "code (AutoPublishCodeSha256 replaces SAM's hash of the code)")
                moves.append(f"{a.version_of(f)} -> {b.version_of(f)}")
        return ", ".join(moves)

    def description_len(self):
        out = []
        params = self.template["Parameters"]
        for f in (INGRESS, WORKER, MANAGED_INGRESS, MANAGED_WORKER):
            if f not in self.template["Resources"]:
                continue
            desc = self.template["Resources"][f]["Properties"].get("VersionDescription")
            if desc is None:
                continue
            worst = {}
            for n in parameters_in(desc, self.template):
                v = longest(params[n])
                if v is None:
                    raise CheckFailed(f"{f}'s VersionDescription names {n}, which has no maximum length")
                worst[n] = v
            resolved = substitute(desc, worst)
            if len(resolved) > 256:
                raise CheckFailed(f"{f}'s VersionDescription can reach {len(resolved)} characters")
            out.append(f"{f} at most {len(resolved)}")
        return ", ".join(out)

# ------------------------------------------------------------------ self-test

def _props(t, name):
    return t["Resources"][name]["Properties"]


def _ingress_policy_if(t):
    """The template before: the ingress allowed UpdateItem or SendMessage, as Mode said."""
    for p in _props(t, INGRESS)["Policies"]:
        st = p.get("Statement", []) if isinstance(p, dict) else []
        if any(s.get("Action") == "sqs:SendMessage" for s in st if isinstance(s, dict)):
            send = next(s for s in st if s.get("Action") == "sqs:SendMessage")
            update = next(s for s in st if "dynamodb:UpdateItem" in as_list(s.get("Action")))
            p["Statement"] = [{"Fn::If": ["IsDeferred", send, update]}]
            return
    raise LookupError("no ingress statement allowing sqs:SendMessage")


def _update_only(t):
    """The template before the claim's put: the roles allowed UpdateItem alone on the ledger."""
    for r in t["Resources"].values():
        for p in (r.get("Properties") or {}).get("Policies", []) if isinstance(r.get("Properties"), dict) else []:
            for s in p.get("Statement", []) if isinstance(p, dict) else []:
                if isinstance(s, dict) and "dynamodb:PutItem" in as_list(s.get("Action")):
                    s["Action"] = "dynamodb:UpdateItem"


def _on_every_deny(change):
    """`change` applied to the statement NoOtherAppsInstallationItems of every function."""
    def mutate(t):
        found = 0
        for r in t["Resources"].values():
            if r.get("Type") != "AWS::Serverless::Function":
                continue
            for p in r["Properties"].get("Policies", []):
                statements = p.get("Statement", []) if isinstance(p, dict) else []
                for s in list(statements):
                    if isinstance(s, dict) and s.get("Sid") == "NoOtherAppsInstallationItems":
                        found += 1
                        if change(s) == "remove":
                            statements.remove(s)
        if not found:
            raise LookupError("no statement NoOtherAppsInstallationItems")
    return mutate


def _deferred_only(t):
    """The template before: the queues and the worker only in deferred mode."""
    for r in t["Resources"].values():
        if r["Type"] in ("AWS::SQS::Queue", "AWS::Lambda::EventSourceMapping") or r is t["Resources"][WORKER]:
            r["Condition"] = "IsDeferred"


def _sam_sqs_event(t):
    """The template before: the mapping as a SAM SQS event."""
    name, m = next((n, r) for n, r in t["Resources"].items() if r["Type"] == "AWS::Lambda::EventSourceMapping")
    del t["Resources"][name]
    p = m["Properties"]
    _props(t, WORKER)["Events"] = {"Work": {"Type": "SQS", "Properties": {
        "Queue": p["EventSourceArn"], "BatchSize": p["BatchSize"],
        "FunctionResponseTypes": p["FunctionResponseTypes"], "ScalingConfig": p["ScalingConfig"]}}}


def _mapping_props(t):
    return next(r for r in t["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping")["Properties"]


def _worker_sqs_statement(t):
    for p in _props(t, WORKER)["Policies"]:
        for s in p.get("Statement", []):
            if "sqs:ReceiveMessage" in as_list(s.get("Action")):
                return s
    raise LookupError("no worker statement allowing sqs:ReceiveMessage")


def _set(path_fn, key, value):
    def mutate(t):
        path_fn(t)[key] = value
    return mutate


def _without_key(path_fn, key):
    def mutate(t):
        del path_fn(t)[key]
    return mutate


def _alarm_metric(t, alarm, metric_id):
    return next(m for m in _props(t, alarm)["Metrics"] if isinstance(m, dict) and m.get("Id") == metric_id)


def _worker_alarm_dims_ingress(t):
    for m in _props(t, WORKER_ALARM)["Metrics"]:
        ms = [m] if isinstance(m, dict) and "MetricStat" in m else \
            [x for x in (m.get("Fn::If", [None, {}, {}])[1:] if isinstance(m, dict) else []) if isinstance(x, dict) and "MetricStat" in x]
        for x in ms:
            for dim in x["MetricStat"]["Metric"].get("Dimensions", []):
                dim["Value"] = {"Fn::GetAtt": [INGRESS + ".Version", "Version"]}


def _worker_alarm_failed_always(t):
    ms = _props(t, WORKER_ALARM)["Metrics"]
    for i, m in enumerate(ms):
        if isinstance(m, dict) and "Fn::If" in m:
            ms[i] = m["Fn::If"][1]
    _alarm_metric(t, WORKER_ALARM, "failures")["Expression"] = "FILL(errors, 0) + FILL(failed, 0) + FILL(deadlettered, 0)"


def _remove_version_description(name):
    return _without_key(lambda t: _props(t, name), "VersionDescription")


def _describe_extra(name, param):
    def mutate(t):
        p = _props(t, name)
        p["VersionDescription"] = {"Fn::Sub": p["VersionDescription"]["Fn::Sub"] + f" {param}=${{{param}}}"}
    return mutate


def _describe_without(name, param):
    def mutate(t):
        p = _props(t, name)
        p["VersionDescription"] = {"Fn::Sub": re.sub(r"\s*\S*\$\{" + param + r"\}", "", p["VersionDescription"]["Fn::Sub"])}
    return mutate


def _lmi_config(name):
    return lambda t: _props(t, name)["CapacityProviderConfig"]


def _operator_role(t):
    return _props(t, _props(t, PROVIDER)["PermissionsConfig"]["CapacityProviderOperatorRoleArn"]["Fn::GetAtt"][0])


def _unconditional_provider(t):
    """The capacity provider and its role whatever ManagedInstances says."""
    role = _props(t, PROVIDER)["PermissionsConfig"]["CapacityProviderOperatorRoleArn"]["Fn::GetAtt"][0]
    for name in (PROVIDER, role):
        del t["Resources"][name]["Condition"]


def _rule_assertion(t):
    return t["Rules"]["ManagedInstancesNeedSubnets"]["Assertions"][0]


def _on_ordinary(path_fn):
    """Fn::If [IsManagedInstances, managed, ordinary] -> ordinary, at path_fn(t) (a dict holding "Value")."""
    def mutate(t):
        node = path_fn(t)
        node["Value"] = node["Value"]["Fn::If"][2]
    return mutate


def _dims(t, alarm):
    return _props(t, alarm)["Dimensions"]


def _worker_alarm_on_ordinary(t):
    for m in _props(t, WORKER_ALARM)["Metrics"]:
        ms = [m] if isinstance(m, dict) and "MetricStat" in m else \
            [x for x in (m.get("Fn::If", [None, {}, {}])[1:] if isinstance(m, dict) else []) if isinstance(x, dict) and "MetricStat" in x]
        for x in ms:
            for dim in x["MetricStat"]["Metric"].get("Dimensions", []):
                dim["Value"] = dim["Value"]["Fn::If"][2]


def _dashboard_on_ordinary(t):
    body, names = _props(t, "Dashboard")["DashboardBody"]["Fn::Sub"]
    _props(t, "Dashboard")["DashboardBody"] = {"Fn::Sub": body.replace("${IngressFunction}", "${" + INGRESS + "}")
                                               .replace("${WorkerFunction}", "${" + WORKER + "}")}


MUTATIONS = [
    # (what the mutation does, the checks that must fail, the mutation)
    ("the ingress allows UpdateItem or SendMessage as Mode says (as before)", {"ingress-role"}, _ingress_policy_if),
    ("the roles allow UpdateItem alone on the ledger (before the claim's put)", {"ingress-role", "worker-role"},
     _update_only),
    ("the queues, the mapping and the worker only in deferred mode (as before)", {"queue-worker"}, _deferred_only),
    ("the worker without WORK_QUEUE_URL (as before)", {"queue-worker"},
     _without_key(lambda t: _props(t, WORKER)["Environment"]["Variables"], "WORK_QUEUE_URL")),
    ("the ingress's WORK_QUEUE_URL in both modes", {"ingress-env"},
     _set(lambda t: _props(t, INGRESS)["Environment"]["Variables"], "WORK_QUEUE_URL", {"Ref": QUEUE})),
    ("the mapping as a SAM SQS event (as before)", {"mapping", "no-sqs-star"}, _sam_sqs_event),
    ("the mapping on the worker function, not its alias", {"mapping"},
     _set(_mapping_props, "FunctionName", {"Ref": WORKER})),
    ("the mapping without ReportBatchItemFailures", {"mapping"}, _without_key(_mapping_props, "FunctionResponseTypes")),
    ("the worker's SQS statement on \"*\"", {"worker-role", "no-sqs-star"},
     _set(_worker_sqs_statement, "Resource", "*")),
    ("a managed SQS policy on the ingress", {"no-sqs-star"},
     lambda t: _props(t, INGRESS)["Policies"].append("AmazonSQSFullAccess")),
    ("the worker alarm left out of the worker's deployment", {"worker-alarm"},
     lambda t: _props(t, WORKER)["DeploymentPreference"]["Alarms"].remove({"Ref": WORKER_ALARM})),
    ("the worker alarm without WorkerErrors", {"worker-alarm"},
     _set(lambda t: _alarm_metric(t, WORKER_ALARM, "failures"), "Expression",
          {"Fn::If": ["IsDeferred", "FILL(failed, 0) + FILL(deadlettered, 0)", "FILL(deadlettered, 0)"]})),
    ("the worker alarm on the ingress's version", {"worker-alarm"}, _worker_alarm_dims_ingress),
    ("the worker alarm counting Failed in synchronous mode too", {"worker-alarm"}, _worker_alarm_failed_always),
    ("the worker alarm deciding after 10 minutes", {"worker-alarm"},
     _set(lambda t: _props(t, WORKER_ALARM), "EvaluationPeriods", 10)),
    ("the failure rate over Deliveries + QueuedEvents (as before)", {"failure-rate"},
     _set(lambda t: _alarm_metric(t, RATE_ALARM, "events"), "Expression", "FILL(deliveries, 0) + FILL(queuedevents, 0)")),
    ("the ingress without VersionDescription (as before)", {"mode-publishes", "version-params"},
     _remove_version_description(INGRESS)),
    ("AutoPublishCodeSha256: !Ref Mode instead", {"code-publishes"},
     lambda t: (_remove_version_description(INGRESS)(t),
                _props(t, INGRESS).__setitem__("AutoPublishCodeSha256", {"Ref": "Mode"}))),
    ("LogRetentionDays in the ingress's VersionDescription", {"no-spurious", "version-params"},
     _describe_extra(INGRESS, "LogRetentionDays")),
    ("the worker's VersionDescription without WorkerTimeout", {"version-params"},
     _describe_without(WORKER, "WorkerTimeout")),
    ("SlackSecretName up to 400 characters", {"description-len"},
     _set(lambda t: t["Parameters"]["SlackSecretName"], "MaxLength", 400)),
    # Lambda Managed Instances
    ("the capacity provider and its operator role whatever ManagedInstances says", {"lmi-off"},
     _unconditional_provider),
    ("ManagedInstancesMaxConcurrency in the ordinary ingress's environment", {"lmi-off", "version-params", "twins"},
     _set(lambda t: _props(t, INGRESS)["Environment"]["Variables"], "MAX_CONCURRENCY",
          {"Ref": "ManagedInstancesMaxConcurrency"})),
    ("the managed twins' deployment groups whatever ManagedInstances says (no PassthroughCondition)", {"lmi-off"},
     lambda t: [_props(t, m)["DeploymentPreference"].pop("PassthroughCondition") for m in TWINS.values()]),
    ("the ordinary ingress's deployment group whatever ManagedInstances says", {"lmi-on"},
     lambda t: _props(t, INGRESS)["DeploymentPreference"].pop("PassthroughCondition")),
    ("the managed worker without PerExecutionEnvironmentMaxConcurrency", {"lmi-on"},
     _without_key(_lmi_config(MANAGED_WORKER), "PerExecutionEnvironmentMaxConcurrency")),
    ("the managed ingress at 256 MB", {"lmi-on"}, _set(lambda t: _props(t, MANAGED_INGRESS), "MemorySize", 256)),
    ("ReservedConcurrentExecutions on the managed ingress", {"lmi-on"},
     lambda t: _props(t, MANAGED_INGRESS).__setitem__("ReservedConcurrentExecutions",
                                                      _props(t, INGRESS)["ReservedConcurrentExecutions"])),
    ("the instances fixed at x86_64 (the functions are arm64)", {"lmi-on"},
     _set(lambda t: _props(t, PROVIDER)["InstanceRequirements"], "Architectures", ["x86_64"])),
    ("the instances without their security groups", {"lmi-on"},
     _set(lambda t: _props(t, PROVIDER)["VpcConfig"], "SecurityGroupIds", [])),
    ("the managed ingress's Function URL output on the ordinary one", {"lmi-on", "refs-exist"},
     _on_ordinary(lambda t: t["Outputs"]["SlackRequestUrl"])),
    ("the operator role also trusted by ec2.amazonaws.com", {"operator-role"},
     lambda t: _operator_role(t)["AssumeRolePolicyDocument"]["Statement"].append(
         {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"})),
    ("the operator role with an inline ec2:* on \"*\"", {"operator-role"},
     _set(_operator_role, "Policies", [{"PolicyName": "more", "PolicyDocument": {
         "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}}])),
    ("the operator policy on the managed ingress's role", {"operator-role"},
     lambda t: _props(t, MANAGED_INGRESS)["Policies"].append(f"arn:aws:iam::aws:policy/{OPERATOR_POLICY}")),
    ("ec2:RunInstances for the managed worker", {"operator-role"},
     lambda t: _props(t, MANAGED_WORKER)["Policies"][0]["Statement"].append(
         {"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "*"})),
    ("the rule ManagedInstancesNeedSubnets left out", {"lmi-rules"}, lambda t: t.pop("Rules")),
    ("the rule on the security groups instead of the subnets", {"lmi-rules"},
     _set(_rule_assertion, "Assert", {"Fn::Not": [{"Fn::Contains": [{"Ref": "ManagedInstancesSecurityGroupIds"}, ""]}]})),
    ("the rule's message not naming the parameter", {"lmi-rules"},
     _set(_rule_assertion, "AssertDescription", "Lambda Managed Instances need a VPC")),
    ("a statement on the ordinary ingress only", {"twins"},
     lambda t: _props(t, INGRESS)["Policies"].append({"Statement": [
         {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": {"Fn::GetAtt": [LEDGER, "Arn"]}}]})),
    ("the managed worker's timeout fixed at 60 s", {"twins"}, _set(lambda t: _props(t, MANAGED_WORKER), "Timeout", 60)),
    ("the managed ingress without VersionDescription", {"mode-publishes", "version-params"},
     _remove_version_description(MANAGED_INGRESS)),
    ("the managed worker's VersionDescription without ManagedInstancesMaxConcurrency", {"version-params"},
     _describe_without(MANAGED_WORKER, "ManagedInstancesMaxConcurrency")),
    ("the mapping always on the ordinary worker's alias", {"mapping", "refs-exist"},
     _set(_mapping_props, "FunctionName", {"Ref": WORKER + ".Alias"})),
    ("the worker's failures alarm on the ordinary worker's versions (as before the twins)",
     {"worker-alarm", "alarm-targets", "refs-exist"}, _worker_alarm_on_ordinary),
    ("the ingress's 5xx alarm on the ordinary ingress's versions", {"alarm-targets", "refs-exist"},
     _on_ordinary(lambda t: _dims(t, "NewVersion5xxAlarm")[0])),
    ("the dashboard on the ordinary functions (as before the twins)", {"refs-exist"}, _dashboard_on_ordinary),
    # Apps sharing a table
    ("no statement keeping the roles off other apps' installation items (as before)", {"own-items"},
     _on_every_deny(lambda s: "remove")),
    ("this app's items spared without the client id (install#*, ...)", {"own-items"},
     _on_every_deny(lambda s: s["Condition"]["ForAllValues:StringNotLike"].__setitem__(
         "dynamodb:LeadingKeys", ["install#*", "install-pace#*", "oauth-state#*"]))),
    ("the previous release's items taken for another app's (install#*, ...)", {"own-items"},
     _on_every_deny(lambda s: s["Condition"]["ForAnyValue:StringLike"].__setitem__(
         "dynamodb:LeadingKeys", ["install#*", "install-pace#*", "oauth-state#*"]))),
    ("the OAuth states left out of the statement", {"own-items"},
     _on_every_deny(lambda s: s["Condition"]["ForAnyValue:StringLike"].__setitem__(
         "dynamodb:LeadingKeys", ["install#*#*#*", "install-pace#*#*#*#*"]))),
    ("the sealing marks left out of the statement", {"own-items"},
     _on_every_deny(lambda s: s["Condition"]["ForAnyValue:StringLike"].__setitem__(
         "dynamodb:LeadingKeys", ["install#*#*#*", "install-pace#*#*#*#*", "oauth-state#*#*"]))),
    ("the statement on DeleteItem alone", {"own-items"},
     _on_every_deny(lambda s: s.__setitem__("Action", "dynamodb:DeleteItem"))),
]


def self_test(template, quiet=False):
    print("== self-test: each check fails on the template broken the way it guards against")
    bad = []
    for what, expected, mutate in MUTATIONS:
        t = copy.deepcopy(template)
        try:
            mutate(t)
        except (LookupError, KeyError, StopIteration, ValueError, TypeError) as e:
            bad.append(what)
            print(f"FAILED  self-test        {what}: the mutation does not apply any more ({e!r}); update it with the template")
            continue
        failed = Checks(t, verbosity=0).all()
        if expected <= set(failed):
            also = sorted(set(failed) - expected)
            if not quiet:
                    print(f"ok      self-test        {what}: " + "; ".join(f"{c} failed ({failed[c]})" for c in sorted(expected)) +
                      (f"; also {', '.join(also)}" if also else ""))
        else:
            bad.append(what)
            print(f"FAILED  self-test        {what}: want {', '.join(sorted(expected))} to fail, "
                  f"failed: {', '.join(sorted(failed)) or 'nothing'}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", default=str(ROOT / "template.yaml"))
    ap.add_argument("--baseline", help="another template (e.g. git show HEAD:template.yaml > /tmp/t.yaml) whose deployed "
                    "stack ManagedInstances=false must equal, for every Mode")
    ap.add_argument("--no-self-test", action="store_true", help="skip breaking the template to see each check fail")
    ap.add_argument("-q", "--quiet", action="store_true", help="print the failures only")
    args = ap.parse_args()
    try:
        template = yaml_parse(Path(args.template).read_text())
    except (OSError, ValueError) as e:
        print(f"template-check: cannot read {args.template}: {e}", file=sys.stderr)
        return 2
    baseline = None
    if args.baseline:
        try:
            baseline = yaml_parse(Path(args.baseline).read_text())
        except (OSError, ValueError) as e:
            print(f"template-check: cannot read {args.baseline}: {e}", file=sys.stderr)
            return 2
    print(f"== template-check: {args.template}, through aws-sam-translator, for every Mode and ManagedInstances")
    failures = Checks(template, verbosity=1 if args.quiet else 2, baseline=baseline).all()
    bad = [] if args.no_self_test else self_test(template, quiet=args.quiet)
    if failures or bad:
        print(f"template-check: {len(failures)} check(s) failed" +
              (f", {len(bad)} self-test(s) failed" if bad else ""), file=sys.stderr)
        return 1
    print("template-check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
