#!/usr/bin/env node
// CDK app: `npx cdk synth` / `npx cdk deploy` from infra/cdk.
//
// Bundling: RustFunction runs `cargo lambda build --release --arm64 --bin <bin>`
// (or, without cargo-lambda on PATH, Docker) on every synth. CI only needs the
// template, so scripts/check-infra.sh synthesizes with CDK_SKIP_BUNDLING=1,
// which sets the context key aws:cdk:bundling-stacks to [] (no stack needs
// bundling). The CLI refuses `-c aws:...` keys and always asks `synth` to
// bundle every stack, so the key is set here as post-CLI context, which wins.
// The function code then points at the un-built source directory with a
// placeholder hash; the CloudFormation template is otherwise identical and no
// Rust is compiled. Never deploy a template synthesized that way; a plain
// `npx cdk deploy` (no CDK_SKIP_BUNDLING) bundles normally.
import * as cdk from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { ToolcallDedupStack } from '../lib/toolcall-dedup-stack';

const skipBundling = ['1', 'true', 'yes'].includes((process.env.CDK_SKIP_BUNDLING ?? '').toLowerCase());
const app = new cdk.App({
  postCliContext: skipBundling ? { 'aws:cdk:bundling-stacks': [] } : {},
});
new ToolcallDedupStack(app, 'ToolcallDedup', {
  stackName: process.env.STACK_NAME ?? 'toolcall-dedup-cdk',
  description: 'toolcall-dedup (CDK): Bedrock Agents action-group executor with a TTL-enabled DynamoDB idempotency table',
  analyticsReporting: false,
  // Environment-agnostic on purpose: synth needs no credentials or lookups.
});
// cdk-nag's AwsSolutions pack as a policy-validation plugin: an unacknowledged finding fails synth
// (scripts/check-infra.sh relies on that). Each acknowledgement carries its reason in the code.
cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
