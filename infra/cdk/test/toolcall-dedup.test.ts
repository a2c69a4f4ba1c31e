// Synth assertions on a sample app that imports the ToolcallDedup construct as a CDK user would
// (issue 53 item 1). Run with `npm test` (Node's own test runner through ts-node; no Rust is built:
// the app skips bundling, as bin/app.ts does under CDK_SKIP_BUNDLING=1).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as cdk from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { AwsSolutionsChecks } from 'cdk-nag';
import { acknowledge, ConfigSource, ToolcallDedup, ToolcallDedupProps } from '../lib';

/** A user's app: one tool function of its own, routed as charge_card, and the construct. */
function sampleApp(props: Partial<ToolcallDedupProps> = {}, nag = false) {
  const app = new cdk.App({ postCliContext: { 'aws:cdk:bundling-stacks': [] } });
  if (nag) cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  const stack = new cdk.Stack(app, 'Sample');
  const payments = new lambda.Function(stack, 'Payments', {
    runtime: lambda.Runtime.NODEJS_LATEST,
    handler: 'index.handler',
    code: lambda.Code.fromInline('exports.handler = async () => ({});'),
  });
  acknowledge(payments, [{
    id: 'AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
    reason: "The sample tool's own role: its logs only",
  }]);
  const dedup = new ToolcallDedup(stack, 'Dedup', {
    mode: 'shadow',
    tools: { charge_card: { function: payments, timeout: cdk.Duration.seconds(20) } },
    ...props,
  });
  const id = (c: { node: { defaultChild?: unknown } }) => stack.resolve((c.node.defaultChild as cdk.CfnElement).logicalId);
  return { app, stack, payments, dedup, id, template: () => Template.fromStack(stack) };
}

/** A resolved value as text: Fn::Join flattened, Ref and GetAtt written ${X} and ${X.Attr}. */
function text(v: any): string {
  if (typeof v === 'string') return v;
  if (v?.['Fn::Join']) return v['Fn::Join'][1].map(text).join(v['Fn::Join'][0]);
  if (v?.Ref) return `\${${v.Ref}}`;
  if (v?.['Fn::GetAtt']) return `\${${v['Fn::GetAtt'].join('.')}}`;
  return JSON.stringify(v);
}

/** The executor role's statements, each with its actions and resources as text. */
function executorStatements(template: Template, roleId: string) {
  const role = template.findResources('AWS::IAM::Role')[roleId];
  assert.ok(role, `role ${roleId}`);
  return (role.Properties.Policies as any[]).flatMap((p) => p.PolicyDocument.Statement).map((st: any) => ({
    sid: st.Sid as string,
    actions: [st.Action].flat() as string[],
    resources: [st.Resource].flat().map(text),
    condition: st.Condition,
  }));
}

function executorEnvironment(template: Template, fnId: string): Record<string, unknown> {
  return template.findResources('AWS::Lambda::Function')[fnId].Properties.Environment.Variables;
}

test('the functions given get an invoke grant (no tag needed), and tagged functions stay invocable', () => {
  const s = sampleApp();
  const statements = executorStatements(s.template(), s.id(s.dedup.role));
  const arn = `\${${s.id(s.payments)}.Arn}`;
  const given = statements.filter((st) => st.resources.includes(arn));
  assert.equal(given.length, 1, JSON.stringify(statements));
  assert.deepEqual(given[0].actions.sort(), ['lambda:GetFunctionConfiguration', 'lambda:InvokeFunction']);
  assert.deepEqual(given[0].resources.sort(), [arn, `${arn}:*`]);
  assert.equal(given[0].condition, undefined);
  const tagged = statements.find((st) => st.sid === 'InvokeTaggedTools');
  assert.deepEqual(tagged?.condition, { StringEquals: { 'aws:ResourceTag/toolcall-dedup:tool': 'true' } });
  // The generated document routes the tool to it, with its timeout.
  const doc = text(s.stack.resolve(s.dedup.configParameter!.value)['Fn::Sub']);
  assert.match(doc, new RegExp(`"charge_card": \\{function: "\\$\\{${s.id(s.payments)}\\}", timeout_seconds: 20\\}`));
});

test('an S3 config source gives the role s3:GetObject on that object, and no SSM read', () => {
  const s = sampleApp({ config: ConfigSource.s3('s3://team-config/dedup/config.yaml') });
  const t = s.template();
  const statements = executorStatements(t, s.id(s.dedup.role));
  const read = statements.filter((st) => st.actions.includes('s3:GetObject')
    && !st.resources.some((r) => r.endsWith('/results/*')));
  assert.deepEqual(read.map((st) => [st.actions, st.resources]),
    [[['s3:GetObject'], ['arn:${AWS::Partition}:s3:::team-config/dedup/config.yaml']]]);
  assert.ok(!statements.some((st) => st.actions.some((a) => a.startsWith('ssm:'))), JSON.stringify(statements));
  assert.equal(executorEnvironment(t, s.id(s.dedup.dedupFunction)).DEDUP_CONFIG, 's3://team-config/dedup/config.yaml');
  t.resourceCountIs('AWS::SSM::Parameter', 0);
});

test('an email creates a topic and its subscription, and every alarm notifies that topic', () => {
  const s = sampleApp({ alarmEmail: 'oncall@example.com' });
  const t = s.template();
  t.resourceCountIs('AWS::SNS::Topic', 1);
  const topicId = Object.keys(t.findResources('AWS::SNS::Topic'))[0];
  t.hasResourceProperties('AWS::SNS::Subscription',
    { Protocol: 'email', Endpoint: 'oncall@example.com', TopicArn: { Ref: topicId } });
  const alarms = Object.values(t.findResources('AWS::CloudWatch::Alarm'));
  assert.equal(alarms.length, 10);
  for (const a of alarms) {
    assert.deepEqual([a.Properties.AlarmActions, a.Properties.OKActions], [[{ Ref: topicId }], [{ Ref: topicId }]],
      a.Properties.AlarmDescription);
  }
  Annotations.fromStack(s.stack).hasNoWarning('*', Match.stringLikeRegexp('NO ONE IS NOTIFIED'));
});

test('no alarm topic and no email: a warning says no one is notified', () => {
  const s = sampleApp();
  Annotations.fromStack(s.stack).hasWarning('/Sample/Dedup', Match.stringLikeRegexp('NO ONE IS NOTIFIED'));
  for (const a of Object.values(s.template().findResources('AWS::CloudWatch::Alarm'))) {
    assert.equal(a.Properties.AlarmActions, undefined);
  }
});

test("the mode flows to the function's environment", () => {
  for (const mode of ['shadow', 'enforce'] as const) {
    const s = sampleApp({ mode });
    assert.equal(executorEnvironment(s.template(), s.id(s.dedup.dedupFunction)).DEDUP_MODE, mode);
  }
});

test('the sample app passes cdk-nag (AwsSolutions), the construct acknowledging its own findings', () => {
  const s = sampleApp({ alarmEmail: 'oncall@example.com' }, true);
  // A policy-validation plugin's unacknowledged finding makes synth throw ("Validation failed").
  assert.doesNotThrow(() => s.app.synth());
});
