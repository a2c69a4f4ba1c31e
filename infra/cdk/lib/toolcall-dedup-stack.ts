// CDK twin of infra/template.yaml (SAM), built through the ToolcallDedup construct that CDK apps
// import (lib/toolcall-dedup.ts). Same parameters, conditions, logical IDs and IAM, so that
// scripts/compare_stacks.py can diff the two synthesized templates. If you change one, change the
// other; CI compares them.
import * as path from 'path';
import * as cdk from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { Validations } from 'aws-cdk-lib';
import * as bedrock from 'aws-cdk-lib/aws-bedrock';
import * as agentcore from 'aws-cdk-lib/aws-bedrockagentcore';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sns from 'aws-cdk-lib/aws-sns';
import { RustFunction } from 'cargo-lambda-cdk';
import { acknowledge, ConfigSource, DedupMode, Outcome, TOOL_TAG, ToolcallDedup } from './toolcall-dedup';

export type { Outcome } from './toolcall-dedup';

/** Cargo manifest of the crate that holds both binaries (repo root). */
const MANIFEST = path.resolve(__dirname, '..', '..', '..', 'Cargo.toml');

/** The demo tool's Timeout (s), also stated in the default route (template.yaml: the same 10). */
const DEMO_TOOL_TIMEOUT_S = 10;

/** Console parameter groups (template.yaml: Metadata AWS::CloudFormation::Interface, the same). */
const PARAMETER_GROUPS: [string, string[]][] = [
  ['Dedup behaviour (the rest lives in the config document)',
    ['Mode', 'ConfigParameterName', 'ConfigDocumentUri', 'EnvelopeNamespaces', 'CreateResultsBucket']],
  ['Bedrock agent wiring', ['AgentArn', 'CreateDemoAgent']],
  ['AgentCore Gateway wiring', ['AgentCoreGatewayArn', 'CreateInterceptorGateway']],
  ['Operations and sizing', ['AlarmTopicArn', 'FunctionMemorySize', 'FunctionTimeout', 'ReservedConcurrency']],
];

/**
 * Give every resource the construct built the logical id template.yaml uses: its construct path
 * below `root`, without L2s' `Resource` (so Dedup/DedupFunctionRole/Resource -> DedupFunctionRole).
 * The construct's ids are template.yaml's names for this. Versions keep CDK's hashed id: a new id
 * per code change is what publishes a new version (compare_stacks.py normalizes it).
 */
function useTemplateLogicalIds(root: Construct): void {
  for (const c of root.node.findAll()) {
    if (!(c instanceof cdk.CfnElement) || c instanceof lambda.CfnVersion) continue;
    const below = c.node.scopes.slice(root.node.scopes.length).map((s) => s.node.id);
    c.overrideLogicalId(below.filter((part) => part !== 'Resource').join(''));
  }
}

export class ToolcallDedupStack extends cdk.Stack {
  /** The construct that builds the executor and its resources. */
  public readonly toolcallDedup: ToolcallDedup;
  /** The idempotency table. */
  public readonly table: dynamodb.CfnTable;
  /** The executor (invoke its `live` alias: {@link aliasArn}). */
  public readonly dedupFunction: lambda.IFunction;
  /** The alias deploys shift gradually, which agents and gateways invoke. */
  public readonly aliasArn: string;

  /** See {@link ToolcallDedup.metricOutcome}. */
  public metricOutcome(outcome: Outcome, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.toolcallDedup.metricOutcome(outcome, props);
  }

  /** See {@link ToolcallDedup.metricLatency}. */
  public metricLatency(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.toolcallDedup.metricLatency(props);
  }

  /** See {@link ToolcallDedup.grantOperator}. */
  public grantOperator(grantee: iam.IGrantable): iam.Grant {
    return this.toolcallDedup.grantOperator(grantee);
  }

  constructor(scope: Construct, id: string, props?: cdk.StackProps) {
    super(scope, id, props);
    this.templateOptions.metadata = {
      'AWS::CloudFormation::Interface': {
        ParameterGroups: PARAMETER_GROUPS.map(([label, names]) => ({ Label: { default: label }, Parameters: names })),
      },
    };

    // ---- parameters (mirror template.yaml) --------------------------------
    const p = (name: string, props: cdk.CfnParameterProps) => new cdk.CfnParameter(this, name, props);
    const mode = p('Mode', {
      type: 'String', default: 'enforce', allowedValues: ['enforce', 'shadow', 'off'],
      description: 'DEDUP_MODE (wins over the document): enforce | shadow | off.',
    });
    const configParameterName = p('ConfigParameterName', {
      type: 'String', default: '', allowedPattern: '^$|^/[A-Za-z0-9_.\\-/]{1,1000}$',
      description: 'SSM parameter holding the config document (docs/configuration.md). Empty = the stack creates '
        + '/<stack name>/config, routing every tool to the demo tool.',
    });
    const configDocumentUri = p('ConfigDocumentUri', {
      type: 'String', default: '', allowedPattern: '^$|^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+$',
      description: 'An s3://bucket/key to read the config document from instead of SSM (for a document over '
        + "SSM's 8 KB); the function may read that object only. Empty = the SSM parameter.",
    });
    const envelopeNamespaces = p('EnvelopeNamespaces', {
      type: 'String', default: '', allowedPattern: '^([A-Za-z0-9_.:-]+(, *[A-Za-z0-9_.:-]+)*)?$',
      description: 'DEDUP_ENVELOPE_NAMESPACES, comma-separated namespaces an invoke-envelope caller may name. '
        + 'Empty = any namespace.',
    });
    const createResultsBucket = p('CreateResultsBucket', {
      type: 'String', default: 'true', allowedValues: ['true', 'false'],
      description: 'Create the results bucket (DEDUP_RESULTS_BUCKET) for tool replies past DynamoDB\'s 400 KB item '
        + 'limit. "false" = such replies are not stored: repeats are told the call already ran instead of getting the reply.',
    });
    const agentArn = p('AgentArn', {
      type: 'String', default: '',
      allowedPattern: '^$|^arn:aws[a-z-]*:bedrock:[a-z0-9-]+:[0-9]{12}:agent/[A-Za-z0-9*]+$',
      description: 'ARN of an existing Bedrock agent allowed to invoke the executor. Empty = none.',
    });
    const createDemoAgent = p('CreateDemoAgent', {
      type: 'String', default: 'false', allowedValues: ['true', 'false'],
      description: 'Create a demo Bedrock agent executed by DedupFunction.',
    });
    const gatewayArn = p('AgentCoreGatewayArn', {
      type: 'String', default: '',
      allowedPattern: '^$|^arn:aws[a-z-]*:bedrock-agentcore:[a-z0-9-]+:[0-9]{12}:gateway/[A-Za-z0-9_-]+$',
      description: 'ARN of an AgentCore Gateway whose Lambda target is the executor. Empty = none.',
    });
    const createInterceptorGateway = p('CreateInterceptorGateway', {
      type: 'String', default: 'false', allowedValues: ['true', 'false'],
      description: 'Create an AgentCore Gateway with the executor as its REQUEST and RESPONSE interceptor.',
    });
    const alarmTopicArn = p('AlarmTopicArn', {
      type: 'String', default: '', allowedPattern: '^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_.-]+$',
      description: 'SNS topic the alarms notify (on alarm and on recovery). Empty = the alarms and the dashboard are '
        + 'still created, and notify no one.',
    });
    const memorySize = p('FunctionMemorySize', {
      type: 'Number', default: 256, minValue: 128, maxValue: 10240,
      description: 'Memory (MB) of the dedup executor.',
    });
    const timeout = p('FunctionTimeout', {
      type: 'Number', default: 30, minValue: 3, maxValue: 900,
      description: 'Timeout (s) of the dedup executor.',
    });
    const reservedConcurrency = p('ReservedConcurrency', {
      type: 'Number', default: 0, minValue: 0, maxValue: 10000,
      description: 'Reserved concurrent executions of the executor; 0 = unreserved. Size: peak calls per second '
        + 'times (the slowest tool plus 1 s) (docs/operations.md).',
    });
    const DEMO_MODEL = 'anthropic.claude-3-haiku-20240307-v1:0';

    // ---- conditions ---------------------------------------------------------
    // Construct ids get a "Condition" suffix (a parameter and a condition may
    // share a name in CloudFormation, but not a construct id in CDK); the
    // logical ID is then set back to the template.yaml name.
    const cond = (id: string, expression: cdk.ICfnConditionExpression) => {
      const c = new cdk.CfnCondition(this, `${id}Condition`, { expression });
      c.overrideLogicalId(id);
      return c;
    };
    const hasConfigParameter = cond('HasConfigParameter',
      cdk.Fn.conditionNot(cdk.Fn.conditionEquals(configParameterName.valueAsString, '')));
    const noConfigParameter = cond('NoConfigParameter', cdk.Fn.conditionEquals(configParameterName.valueAsString, ''));
    const hasConfigDocumentUri = cond('HasConfigDocumentUri',
      cdk.Fn.conditionNot(cdk.Fn.conditionEquals(configDocumentUri.valueAsString, '')));
    const hasAgentArn = cond('HasAgentArn', cdk.Fn.conditionNot(cdk.Fn.conditionEquals(agentArn.valueAsString, '')));
    const hasGateway = cond('HasAgentCoreGateway',
      cdk.Fn.conditionNot(cdk.Fn.conditionEquals(gatewayArn.valueAsString, '')));
    const demoAgentOn = cond('CreateDemoAgent', cdk.Fn.conditionEquals(createDemoAgent.valueAsString, 'true'));
    const interceptorOn = cond('CreateInterceptorGateway',
      cdk.Fn.conditionEquals(createInterceptorGateway.valueAsString, 'true'));
    const resultsOn = cond('CreateResultsBucket', cdk.Fn.conditionEquals(createResultsBucket.valueAsString, 'true'));
    const servesBedrock = cond('ServesBedrock', cdk.Fn.conditionOr(hasAgentArn, demoAgentOn));
    const servesEnvelope = cond('ServesEnvelope',
      cdk.Fn.conditionNot(cdk.Fn.conditionEquals(envelopeNamespaces.valueAsString, '')));
    const hasAlarmTopic = cond('HasAlarmTopic',
      cdk.Fn.conditionNot(cdk.Fn.conditionEquals(alarmTopicArn.valueAsString, '')));
    const hasReservedConcurrency = cond('HasReservedConcurrency',
      cdk.Fn.conditionNot(cdk.Fn.conditionEquals(reservedConcurrency.valueAsNumber, 0)));

    // ---- demo tool ---------------------------------------------------------------------
    // Kept 30 days and retained, as template.yaml's (the executor's own log group is the construct's).
    const demoLogGroup = new logs.CfnLogGroup(this, 'DemoToolLogGroup', { retentionInDays: 30 });
    demoLogGroup.overrideLogicalId('DemoToolLogGroup');
    demoLogGroup.cfnOptions.deletionPolicy = cdk.CfnDeletionPolicy.RETAIN;
    demoLogGroup.cfnOptions.updateReplacePolicy = cdk.CfnDeletionPolicy.RETAIN;
    const demoToolRole = new iam.Role(this, 'DemoToolFunctionRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AWSLambdaBasicExecutionRole')],
    });
    (demoToolRole.node.defaultChild as cdk.CfnResource).overrideLogicalId('DemoToolFunctionRole');
    acknowledge(demoToolRole, [{
      id: 'AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
      reason: 'The demo tool writes its own logs only; what SAM attaches',
    }]);
    const demoTool = new RustFunction(this, 'DemoToolFunction', {
      manifestPath: MANIFEST,
      binaryName: 'demo-tool',
      architecture: lambda.Architecture.ARM_64,
      description: 'toolcall-dedup demo action-group tool (charge_card, refund, create_ticket, echo)',
      memorySize: 128,
      timeout: cdk.Duration.seconds(DEMO_TOOL_TIMEOUT_S),
      role: demoToolRole,
      loggingFormat: lambda.LoggingFormat.JSON,
      applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
      systemLogLevelV2: lambda.SystemLogLevel.WARN,
      logGroup: logs.LogGroup.fromLogGroupName(this, 'DemoToolLogGroupRef', demoLogGroup.ref),
      environment: {
        // DEMO ONLY: a per-container ledger in /tmp, lost when the container is recycled.
        DEMO_LEDGER: '/tmp/toolcall-dedup-demo-ledger.jsonl',
      },
    });
    // The construct grants the executor invoke on the demo tool (it is given as a tool); the tag
    // stays as in template.yaml, whose InvokeTaggedTools statement is the same.
    (demoTool.node.defaultChild as cdk.CfnResource).overrideLogicalId('DemoToolFunction');
    (demoTool.node.defaultChild as lambda.CfnFunction).tags.setTag(TOOL_TAG, 'true');

    // ---- the executor, through the construct CDK apps import -----------------------------------
    // Every deploy-time choice of template.yaml is a CfnParameter here, so the props that have one
    // take it with its condition (WhenCondition).
    const dedup = new ToolcallDedup(this, 'Dedup', {
      mode: mode.valueAsString as DedupMode,
      // The stack's own document routes every tool to the demo tool, its timeout stated.
      tools: { '*': { function: demoTool, timeout: cdk.Duration.seconds(DEMO_TOOL_TIMEOUT_S) } },
      config: {
        value: ConfigSource.ssmParameter(configParameterName.valueAsString),
        onlyIf: hasConfigParameter, otherwiseIf: noConfigParameter,
      },
      configOverride: { value: ConfigSource.s3Uri(configDocumentUri.valueAsString), onlyIf: hasConfigDocumentUri },
      alarmTopic: { value: sns.Topic.fromTopicArn(this, 'AlarmTopic', alarmTopicArn.valueAsString), onlyIf: hasAlarmTopic },
      memorySize: memorySize.valueAsNumber,
      timeout: cdk.Duration.seconds(timeout.valueAsNumber),
      reservedConcurrency: { value: reservedConcurrency.valueAsNumber, onlyIf: hasReservedConcurrency },
      resultsBucket: resultsOn,
      doors: [
        { value: 'bedrock', onlyIf: servesBedrock },
        { value: 'agentcore', onlyIf: hasGateway },
        { value: 'interceptor', onlyIf: interceptorOn },
        { value: 'envelope', onlyIf: servesEnvelope },
      ],
      // The parameter is already the comma-separated list.
      envelopeNamespaces: [envelopeNamespaces.valueAsString],
    });
    this.toolcallDedup = dedup;
    this.table = dedup.table;
    this.dedupFunction = dedup.dedupFunction;
    this.aliasArn = dedup.aliasArn;
    const aliasArn = dedup.aliasArn;

    // ---- Bedrock and AgentCore Gateway -> executor permissions ----------------------------------
    dedup.allowAgent('AgentInvokePermission', agentArn.valueAsString, { onlyIf: hasAgentArn });
    // The synth-time validator does not evaluate conditions: it checks the
    // AgentArn default '' against SourceArn's pattern although this resource
    // only exists when AgentArn is not empty (cfn-lint proper is quiet).
    const falsePositive = {
      id: 'CloudFormation-Validate::W1030',
      reason: 'AgentInvokePermission exists only under HasAgentArn, so SourceArn is never the empty default',
    };
    Validations.of(this).acknowledge(falsePositive);
    dedup.allowGateway('AgentCoreGatewayInvokePermission', gatewayArn.valueAsString, { onlyIf: hasGateway });

    // ---- optional gateway with the executor as its interceptor --------------------------------
    // L1, not the aws-bedrockagentcore Gateway L2: its LambdaInterceptor writes one configuration per
    // interception point and grants invoke through a DefaultPolicy, neither of which template.yaml has.
    const interceptorAlias = dedup.interceptorAlias!;
    const gatewayRole = new iam.CfnRole(this, 'InterceptorGatewayRole', {
      description: 'Service role of the toolcall-dedup interceptor gateway',
      assumeRolePolicyDocument: {
        Version: '2012-10-17',
        Statement: [{
          Effect: 'Allow',
          Principal: { Service: 'bedrock-agentcore.amazonaws.com' },
          Action: 'sts:AssumeRole',
          Condition: {
            StringEquals: { 'aws:SourceAccount': cdk.Aws.ACCOUNT_ID },
            ArnLike: { 'aws:SourceArn': `arn:${cdk.Aws.PARTITION}:bedrock-agentcore:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:gateway/*` },
          },
        }],
      },
      policies: [{
        policyName: 'invoke-interceptor',
        policyDocument: {
          Version: '2012-10-17',
          Statement: [{
            Sid: 'InvokeInterceptor',
            Effect: 'Allow',
            Action: 'lambda:InvokeFunction',
            Resource: interceptorAlias.ref,
          }],
        },
      }],
    });
    gatewayRole.overrideLogicalId('InterceptorGatewayRole');
    gatewayRole.cfnOptions.condition = interceptorOn;
    const gateway = new agentcore.CfnGateway(this, 'InterceptorGateway', {
      name: `${cdk.Aws.STACK_NAME}-gateway`,
      description: 'MCP gateway whose tools/call requests toolcall-dedup deduplicates',
      protocolType: 'MCP',
      authorizerType: 'AWS_IAM',
      roleArn: gatewayRole.attrArn,
      interceptorConfigurations: [{
        interceptor: { lambda: { arn: interceptorAlias.ref } },
        interceptionPoints: ['REQUEST', 'RESPONSE'],
        inputConfiguration: { passRequestHeaders: true },
      }],
    });
    // Sessions: the Gateway issues an Mcp-Session-Id (2025-11-25 clients and earlier), which keys each
    // call's run; without it every call through the gateway is sessionless (AgentCore developer guide,
    // "Use MCP sessions with your gateway": 900-28800 s). Stateless 2026-07-28 clients have no session.
    gateway.addPropertyOverride('ProtocolConfiguration', {
      Mcp: {
        SupportedVersions: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'],
        SessionConfiguration: { SessionTimeoutInSeconds: 28800 },
      },
    });
    gateway.overrideLogicalId('InterceptorGateway');
    gateway.cfnOptions.condition = interceptorOn;

    // ---- optional demo agent ---------------------------------------------------------------
    const agentRole = new iam.CfnRole(this, 'DemoAgentRole', {
      description: 'Service role of the toolcall-dedup demo Bedrock agent',
      assumeRolePolicyDocument: {
        Version: '2012-10-17',
        Statement: [{
          Effect: 'Allow',
          Principal: { Service: 'bedrock.amazonaws.com' },
          Action: 'sts:AssumeRole',
          Condition: {
            StringEquals: { 'aws:SourceAccount': cdk.Aws.ACCOUNT_ID },
            ArnLike: { 'aws:SourceArn': `arn:${cdk.Aws.PARTITION}:bedrock:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:agent/*` },
          },
        }],
      },
      policies: [{
        policyName: 'invoke-foundation-model',
        policyDocument: {
          Version: '2012-10-17',
          Statement: [{
            Sid: 'InvokeDemoModel',
            Effect: 'Allow',
            Action: ['bedrock:InvokeModel', 'bedrock:InvokeModelWithResponseStream'],
            Resource: `arn:${cdk.Aws.PARTITION}:bedrock:${cdk.Aws.REGION}::foundation-model/${DEMO_MODEL}`,
          }],
        },
      }],
    });
    agentRole.overrideLogicalId('DemoAgentRole');
    agentRole.cfnOptions.condition = demoAgentOn;

    const param = (type: string, description: string, required: boolean): bedrock.CfnAgent.ParameterDetailProperty =>
      ({ type, description, required });
    const agent = new bedrock.CfnAgent(this, 'DemoAgent', {
      agentName: `${cdk.Aws.STACK_NAME}-demo-agent`,
      description: 'Demo agent whose tools run behind toolcall-dedup',
      agentResourceRoleArn: agentRole.attrArn,
      foundationModel: DEMO_MODEL,
      autoPrepare: true,
      idleSessionTtlInSeconds: 900,
      instruction: 'You are a billing and support assistant. Use charge_card to take a payment, refund to return '
        + 'money for an earlier charge, and create_ticket to open a support ticket. Amounts are decimal numbers in '
        + "the currency's major unit. Never charge or refund twice for one request; if a tool says an identical call "
        + 'is still running, wait and ask the user before trying again.',
      actionGroups: [
        {
          actionGroupName: 'payments',
          description: 'Take payments and issue refunds',
          actionGroupState: 'ENABLED',
          actionGroupExecutor: { lambda: aliasArn },
          functionSchema: {
            functions: [
              {
                name: 'charge_card',
                description: "Charge a customer's saved card.",
                parameters: {
                  customer_id: param('string', 'Customer ID, e.g. cus_8842', true),
                  amount: param('number', 'Amount in major units, e.g. 42.50', true),
                  currency: param('string', 'ISO 4217 code, e.g. USD', true),
                  capture: param('boolean', 'Capture immediately (true) or only authorize (false)', false),
                  line_items: param('array', 'JSON array of SKU strings, e.g. ["SKU-1","SKU-2"]', false),
                },
              },
              {
                name: 'refund',
                description: 'Refund all or part of an earlier charge.',
                parameters: {
                  charge_id: param('string', 'Charge ID from a charge_card receipt, e.g. ch_3QX9', true),
                  amount: param('number', 'Amount to refund in major units; omit for a full refund', false),
                  reason: param('string', 'duplicate, fraudulent or requested_by_customer', false),
                },
              },
            ],
          },
        },
        {
          actionGroupName: 'support',
          description: 'Open support tickets',
          actionGroupState: 'ENABLED',
          actionGroupExecutor: { lambda: aliasArn },
          functionSchema: {
            functions: [
              {
                name: 'create_ticket',
                description: 'Open a support ticket for a customer.',
                parameters: {
                  customer_id: param('string', 'Customer ID, e.g. cus_8842', true),
                  subject: param('string', 'One-line summary', true),
                  priority: param('integer', '1 (urgent) to 4 (low)', false),
                  tags: param('array', 'JSON array of tag strings, e.g. ["billing","refund"]', false),
                },
              },
            ],
          },
        },
      ],
    });
    agent.overrideLogicalId('DemoAgent');
    agent.cfnOptions.condition = demoAgentOn;

    const alias = new bedrock.CfnAgentAlias(this, 'DemoAgentAlias', {
      agentId: agent.attrAgentId,
      agentAliasName: 'live',
      description: 'Alias of the prepared demo agent',
    });
    alias.overrideLogicalId('DemoAgentAlias');
    alias.cfnOptions.condition = demoAgentOn;

    dedup.allowAgent('DemoAgentInvokePermission', agent.attrAgentArn,
      { onlyIf: demoAgentOn, sourceAccount: cdk.Aws.ACCOUNT_ID });

    // ---- outputs --------------------------------------------------------------------------------
    const out = (id: string, value: string, condition?: cdk.CfnCondition, description?: string) =>
      new cdk.CfnOutput(this, id, { value, condition, description });
    // After every call that adds to the construct (the permissions above).
    useTemplateLogicalIds(dedup);
    const fn = dedup.dedupFunction;
    out('DedupFunctionName', fn.functionName, undefined, 'Executor to set as the action-group Lambda of your agent');
    out('DedupFunctionArn', fn.functionArn, undefined, "The function's unqualified ARN (invoke the alias instead)");
    out('DedupFunctionAliasArn', aliasArn, undefined,
      'ARN for ActionGroupExecutor.Lambda and Gateway targets (the live alias deploys shift gradually)');
    Validations.of(this).acknowledge({
      id: 'CloudFormation-Validate::W1001',
      reason: "the output refers to ConfigParameter only in Fn::If's NoConfigParameter branch, its own condition",
    });
    out('AlarmNotifications',
      cdk.Fn.conditionIf(hasAlarmTopic.logicalId, alarmTopicArn.valueAsString,
        'NONE: the alarms notify no one; deploy again with AlarmTopicArn=<an SNS topic ARN>').toString(),
      undefined, 'Where the alarms notify (AlarmTopicArn); NONE means no one is paged');
    out('ConfigDocumentParameter',
      cdk.Fn.conditionIf(noConfigParameter.logicalId, dedup.configParameter!.ref,
        configParameterName.valueAsString).toString(),
      undefined, 'The SSM parameter the function reads its config document from (aws ssm put-parameter --name)');
    out('DashboardUrl',
      `https://${cdk.Aws.REGION}.console.aws.amazon.com/cloudwatch/home?region=${cdk.Aws.REGION}#dashboards/dashboard/${dedup.dashboard.ref}`,
      undefined, "The operator's dashboard");
    out('DedupFunctionRoleArn', dedup.role.roleArn);
    out('DemoToolFunctionName', demoTool.functionName);
    out('DemoToolFunctionArn', demoTool.functionArn);
    out('IdempotencyTableName', dedup.table.ref);
    out('IdempotencyTableArn', dedup.table.attrArn);
    out('ResultsBucketName', dedup.resultsBucket!.ref, resultsOn, 'Bucket holding replies past the DynamoDB item limit (DEDUP_RESULTS_BUCKET)');
    out('InterceptorGatewayUrl', gateway.attrGatewayUrl, interceptorOn, 'MCP endpoint of the gateway the executor intercepts');
    out('DemoAgentId', agent.attrAgentId, demoAgentOn);
    out('DemoAgentArn', agent.attrAgentArn, demoAgentOn);
    out('DemoAgentAliasId', alias.attrAgentAliasId, demoAgentOn, 'Use with InvokeAgent --agent-alias-id');
  }
}
