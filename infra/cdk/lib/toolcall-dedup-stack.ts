// CDK twin of infra/template.yaml (SAM). Same parameters, conditions, logical
// IDs and IAM, so that scripts/compare_stacks.py can diff the two synthesized
// templates. If you change one, change the other; CI compares them.
import * as path from 'path';
import * as cdk from 'aws-cdk-lib';
import { Construct } from 'constructs';
import { Validations } from 'aws-cdk-lib';
import * as bedrock from 'aws-cdk-lib/aws-bedrock';
import * as agentcore from 'aws-cdk-lib/aws-bedrockagentcore';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as codedeploy from 'aws-cdk-lib/aws-codedeploy';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { RustFunction } from 'cargo-lambda-cdk';

/** Cargo manifest of the crate that holds both binaries (repo root). */
const MANIFEST = path.resolve(__dirname, '..', '..', '..', 'Cargo.toml');

/** The demo tool's Timeout (s), also stated in the default route (template.yaml: the same 10). */
const DEMO_TOOL_TIMEOUT_S = 10;

/** Console parameter groups (template.yaml: Metadata AWS::CloudFormation::Interface, the same). */
const PARAMETER_GROUPS: [string, string[]][] = [
  ['Dedup behaviour (the rest lives in the config document)',
    ['Mode', 'ConfigParameterName', 'EnvelopeNamespaces', 'CreateResultsBucket']],
  ['Bedrock agent wiring', ['AgentArn', 'CreateDemoAgent']],
  ['AgentCore Gateway wiring', ['AgentCoreGatewayArn', 'CreateInterceptorGateway']],
  ['Operations and sizing', ['AlarmTopicArn', 'FunctionMemorySize', 'FunctionTimeout', 'ReservedConcurrency']],
];

/** The metrics the executor emits (EMF), one Count per outcome: what metricOutcome() takes. */
export type Outcome = 'executed' | 'replayed' | 'waited' | 'in_progress' | 'store_error' | 'outcome_unknown'
  | 'sessionless' | 'tool_error' | 'bad_request' | 'dedup_off' | 'passed_unread' | 'door_refused'
  | 'shadow_replay' | 'passed_on' | 'idempotency_key_reused';

export class ToolcallDedupStack extends cdk.Stack {
  /** The idempotency table. */
  public readonly table: dynamodb.CfnTable;
  /** The executor (invoke its `live` alias: {@link aliasArn}). */
  public readonly dedupFunction: lambda.IFunction;
  /** The alias deploys shift gradually, which agents and gateways invoke. */
  public readonly aliasArn: string;
  private readonly metricsNamespace: string;

  /**
   * One of the executor's outcome counts for the whole service (the alarms' view), or split by
   * door and tool with `dimensionsMap: { Service, Door, Tool }`.
   */
  public metricOutcome(outcome: Outcome, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: this.metricsNamespace,
      metricName: outcome,
      dimensionsMap: { Service: this.dedupFunction.functionName },
      statistic: 'Sum',
      ...props,
    });
  }

  /** Invocation latency as the executor measures it (ms, event to answer). */
  public metricLatency(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: this.metricsNamespace,
      metricName: 'latency_ms',
      dimensionsMap: { Service: this.dedupFunction.functionName },
      statistic: 'p99',
      ...props,
    });
  }

  /**
   * What `dedup list`, `show`, `evict` and `settle` need: read, query (the attention index), scan,
   * and the fenced update and delete of one record.
   */
  public grantOperator(grantee: iam.IGrantable): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:Scan', 'dynamodb:UpdateItem',
        'dynamodb:DeleteItem', 'dynamodb:DescribeTable'],
      resourceArns: [this.table.attrArn, `${this.table.attrArn}/index/attention`],
    });
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
    /** Fixed here (the config document holds the behaviour): see docs/configuration.md. */
    const METRICS_NAMESPACE = 'ToolcallDedup';
    const RESULTS_RETENTION_DAYS = 32;
    const LOG_RETENTION_DAYS = 30;
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

    /** Give an L2 construct's resource the same logical ID as in template.yaml. */
    const sameId = (c: Construct, logicalId: string) =>
      (c.node.defaultChild as cdk.CfnResource).overrideLogicalId(logicalId);
    const retain = (r: cdk.CfnResource) => {
      r.cfnOptions.deletionPolicy = cdk.CfnDeletionPolicy.RETAIN;
      r.cfnOptions.updateReplacePolicy = cdk.CfnDeletionPolicy.RETAIN;
    };

    // ---- idempotency table ------------------------------------------------------
    // L1 on purpose: the key/TTL names and PITR come from parameters (tokens),
    // which the L2 Table cannot take for every property.
    const table = new dynamodb.CfnTable(this, 'IdempotencyTable', {
      billingMode: 'PAY_PER_REQUEST',
      attributeDefinitions: [
        { attributeName: 'pk', attributeType: 'S' },
        { attributeName: 'attention', attributeType: 'S' },
        { attributeName: 'created_at', attributeType: 'N' },
      ],
      keySchema: [{ attributeName: 'pk', keyType: 'HASH' }],
      // Sparse: only records that need an operator carry `attention`, so listing them is a query.
      globalSecondaryIndexes: [{
        indexName: 'attention',
        keySchema: [
          { attributeName: 'attention', keyType: 'HASH' },
          { attributeName: 'created_at', keyType: 'RANGE' },
        ],
        projection: { projectionType: 'ALL' },
      }],
      timeToLiveSpecification: { attributeName: 'expires_at', enabled: true },
      sseSpecification: { sseEnabled: true },
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      tags: [{ key: 'app', value: 'toolcall-dedup' }],
    });
    table.overrideLogicalId('IdempotencyTable');
    retain(table);

    // ---- results bucket (replies past the DynamoDB item limit) ---------------------
    // L1 like the table: the expiration comes from a parameter, the bucket from a
    // condition. The executor writes results/<key>/<lease token> and reads it back;
    // the lifecycle rule expires the objects (the function checks it covers every TTL).
    const bucket = new s3.CfnBucket(this, 'ResultsBucket', {
      // SSE-S3: no kms:* permission needed (BucketKeyEnabled only takes effect with SSE-KMS).
      bucketEncryption: {
        serverSideEncryptionConfiguration: [{
          serverSideEncryptionByDefault: { sseAlgorithm: 'AES256' },
          bucketKeyEnabled: true,
        }],
      },
      publicAccessBlockConfiguration: {
        blockPublicAcls: true, blockPublicPolicy: true, ignorePublicAcls: true, restrictPublicBuckets: true,
      },
      ownershipControls: { rules: [{ objectOwnership: 'BucketOwnerEnforced' }] },
      lifecycleConfiguration: {
        rules: [{
          id: 'ExpireResults',
          status: 'Enabled',
          prefix: 'results/',
          expirationInDays: RESULTS_RETENTION_DAYS,
          abortIncompleteMultipartUpload: { daysAfterInitiation: 1 },
        }],
      },
      tags: [{ key: 'app', value: 'toolcall-dedup' }],
    });
    bucket.overrideLogicalId('ResultsBucket');
    bucket.cfnOptions.condition = resultsOn;
    retain(bucket);
    const bucketPolicy = new s3.CfnBucketPolicy(this, 'ResultsBucketPolicy', {
      bucket: bucket.ref,
      policyDocument: {
        Version: '2012-10-17',
        Statement: [{
          Sid: 'DenyInsecureTransport',
          Effect: 'Deny',
          Principal: '*',
          Action: 's3:*',
          Resource: [bucket.attrArn, `${bucket.attrArn}/*`],
          Condition: { Bool: { 'aws:SecureTransport': 'false' } },
        }],
      },
    });
    bucketPolicy.overrideLogicalId('ResultsBucketPolicy');
    bucketPolicy.cfnOptions.condition = resultsOn;

    // ---- roles (same shape as the ones SAM generates) -------------------------------
    const basicExecution = iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AWSLambdaBasicExecutionRole');
    const lambdaRole = (id: string, inline?: Record<string, iam.PolicyDocument>) => {
      const role = new iam.Role(this, id, {
        assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
        managedPolicies: [basicExecution],
        inlinePolicies: inline,
      });
      sameId(role, id);
      return role;
    };

    const logGroup = (id: string) => {
      const lg = new logs.CfnLogGroup(this, id, { retentionInDays: LOG_RETENTION_DAYS });
      lg.overrideLogicalId(id);
      retain(lg);
      return logs.LogGroup.fromLogGroupName(this, `${id}Ref`, lg.ref);
    };

    // ---- demo tool ---------------------------------------------------------------------
    const demoTool = new RustFunction(this, 'DemoToolFunction', {
      manifestPath: MANIFEST,
      binaryName: 'demo-tool',
      architecture: lambda.Architecture.ARM_64,
      description: 'toolcall-dedup demo action-group tool (charge_card, refund, create_ticket, echo)',
      memorySize: 128,
      timeout: cdk.Duration.seconds(DEMO_TOOL_TIMEOUT_S),
      role: lambdaRole('DemoToolFunctionRole'),
      loggingFormat: lambda.LoggingFormat.JSON,
      applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
      systemLogLevelV2: lambda.SystemLogLevel.WARN,
      logGroup: logGroup('DemoToolLogGroup'),
      environment: {
        // DEMO ONLY: a per-container ledger in /tmp, lost when the container is recycled.
        DEMO_LEDGER: '/tmp/toolcall-dedup-demo-ledger.jsonl',
      },
    });
    sameId(demoTool, 'DemoToolFunction');
    // A tool the executor may invoke (its InvokeTaggedTools statement).
    (demoTool.node.defaultChild as lambda.CfnFunction).tags.setTag('toolcall-dedup:tool', 'true');

    // ---- the config document (unless ConfigParameterName names one of yours) ----------------
    const configParameter = new ssm.CfnParameter(this, 'ConfigParameter', {
      name: `/${cdk.Aws.STACK_NAME}/config`,
      type: 'String',
      tier: 'Intelligent-Tiering',
      description: 'toolcall-dedup config document (docs/configuration.md)',
      value: cdk.Fn.sub([
        '# toolcall-dedup config document: routes, settings, key policies, schemas.',
        '# Check an edit with `dedup config check FILE`, then put it here.',
        'routes:',
        `  "*": {function: "\${DemoToolFunction}", timeout_seconds: ${DEMO_TOOL_TIMEOUT_S}}`,
        '',
      ].join('\n')),
    });
    configParameter.overrideLogicalId('ConfigParameter');
    configParameter.cfnOptions.condition = noConfigParameter;
    const configName = cdk.Token.asString(cdk.Fn.conditionIf(
      hasConfigParameter.logicalId, configParameterName.valueAsString, configParameter.ref));

    // ---- dedup executor ------------------------------------------------------------------
    // Exactly the four item actions the store uses, on the table ARN; InvokeFunction (and
    // GetFunctionConfiguration, a tool's timeout when its route states none) on the demo tool
    // and on the functions tagged toolcall-dedup:tool=true: the routed tools are named in one
    // place, the document's routes; GetParameter on the config document.
    const toolActions = ['lambda:InvokeFunction', 'lambda:GetFunctionConfiguration'];
    const dedupPolicy = new iam.PolicyDocument({
      statements: [
        new iam.PolicyStatement({
          sid: 'IdempotencyItems',
          actions: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
          resources: [table.attrArn],
        }),
        new iam.PolicyStatement({
          sid: 'InvokeDemoTool',
          actions: toolActions,
          resources: [demoTool.functionArn, `${demoTool.functionArn}:*`],
        }),
        new iam.PolicyStatement({
          sid: 'InvokeTaggedTools',
          actions: toolActions,
          resources: [`arn:${cdk.Aws.PARTITION}:lambda:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:function:*`],
          conditions: { StringEquals: { 'aws:ResourceTag/toolcall-dedup:tool': 'true' } },
        }),
        new iam.PolicyStatement({
          sid: 'ReadConfigDocument',
          actions: ['ssm:GetParameter'],
          resources: [cdk.Fn.sub('arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${Name}',
            { Name: configName })],
        }),
        new iam.PolicyStatement({
          sid: 'AnnounceUnknownOutcomes',
          actions: ['events:PutEvents'],
          resources: [cdk.Fn.sub('arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/default')],
        }),
      ],
    });
    const dedupRole = lambdaRole('DedupFunctionRole', { DedupFunctionRolePolicy0: dedupPolicy });
    // Offloaded results: write and read objects under results/ only (no list, no delete: the
    // lifecycle rule expires them). PolicyStatement cannot carry Fn::If: spliced in.
    (dedupRole.node.defaultChild as iam.CfnRole).addPropertyOverride(
      'Policies.0.PolicyDocument.Statement.5',
      cdk.Fn.conditionIf(resultsOn.logicalId, {
        Sid: 'ResultObjects', Effect: 'Allow', Action: ['s3:GetObject', 's3:PutObject'],
        Resource: `${bucket.attrArn}/results/*`,
      }, cdk.Aws.NO_VALUE),
    );

    const dedup = new RustFunction(this, 'DedupFunction', {
      manifestPath: MANIFEST,
      binaryName: 'toolcall-dedup',
      architecture: lambda.Architecture.ARM_64,
      description: 'Bedrock action-group executor that deduplicates tool calls',
      memorySize: memorySize.valueAsNumber,
      timeout: cdk.Duration.seconds(timeout.valueAsNumber),
      role: dedupRole,
      loggingFormat: lambda.LoggingFormat.JSON,
      applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
      systemLogLevelV2: lambda.SystemLogLevel.WARN,
      logGroup: logGroup('DedupLogGroup'),
      environment: {
        // The wiring: what the stack built and decides. Everything else is the document's.
        DEDUP_TABLE_NAME: table.ref,
        DEDUP_KEY_ATTRIBUTE: 'pk',
        DEDUP_TTL_ATTRIBUTE: 'expires_at',
        DEDUP_CONFIG: cdk.Fn.sub('ssm:${Name}', { Name: configName }),
        DEDUP_MODE: mode.valueAsString,
        DEDUP_METRICS_NAMESPACE: METRICS_NAMESPACE,
        DEDUP_ENVELOPE_NAMESPACES: envelopeNamespaces.valueAsString,
        // The doors this stack wires, and no other (the envelope once EnvelopeNamespaces is set).
        DEDUP_DOORS: cdk.Fn.join(',', [
          'none',
          ...([
            [servesBedrock, 'bedrock'],
            [hasGateway, 'agentcore'],
            [interceptorOn, 'interceptor'],
            [servesEnvelope, 'envelope'],
          ] as [cdk.CfnCondition, string][]).map(([on, door]) =>
            cdk.Token.asString(cdk.Fn.conditionIf(on.logicalId, door, 'none'))),
        ]),
        // The interceptor door answers through its own alias only, and that alias nothing else:
        // no envelope invoker can write a catalog with a forged tools/list RESPONSE.
        DEDUP_INTERCEPTOR_ALIAS: cdk.Token.asString(
          cdk.Fn.conditionIf(interceptorOn.logicalId, 'interceptor', cdk.Aws.NO_VALUE)),
        // Empty = no offload: a reply past the item limit is not stored.
        DEDUP_RESULTS_BUCKET: cdk.Token.asString(cdk.Fn.conditionIf(resultsOn.logicalId, bucket.ref, '')),
        DEDUP_RESULTS_RETENTION_DAYS: String(RESULTS_RETENTION_DAYS),
        // Each call left with its outcome unknown is announced here (docs/operations.md).
        DEDUP_EVENT_BUS: 'default',
      },
    });
    sameId(dedup, 'DedupFunction');

    // X-Ray (the stages as subsegments) and reserved concurrency, set as SAM sets them: the
    // managed policy SAM attaches for Tracing: Active, not the inline statement CDK would add.
    const cfnDedup = dedup.node.defaultChild as lambda.CfnFunction;
    cfnDedup.tracingConfig = { mode: 'Active' };
    cfnDedup.addPropertyOverride('ReservedConcurrentExecutions',
      cdk.Fn.conditionIf(hasReservedConcurrency.logicalId, reservedConcurrency.valueAsNumber, cdk.Aws.NO_VALUE));
    dedupRole.addManagedPolicy(iam.ManagedPolicy.fromAwsManagedPolicyName('AWSXrayWriteOnlyAccess'));
    this.table = table;
    this.dedupFunction = dedup;
    this.metricsNamespace = METRICS_NAMESPACE;

    // ---- operations: alarms and the dashboard (docs/operations.md) -----------------------------
    const notify = cdk.Fn.conditionIf(hasAlarmTopic.logicalId, [alarmTopicArn.valueAsString], cdk.Aws.NO_VALUE);
    const alarm = (id: string, description: string, props: Partial<cloudwatch.CfnAlarmProps>) => {
      const a = new cloudwatch.CfnAlarm(this, id, {
        alarmDescription: description,
        comparisonOperator: 'GreaterThanOrEqualToThreshold',
        treatMissingData: 'notBreaching',
        threshold: 1,
        evaluationPeriods: 1,
        ...props,
      });
      a.overrideLogicalId(id);
      a.addPropertyOverride('AlarmActions', notify);
      a.addPropertyOverride('OKActions', notify);
      return a;
    };
    const service = [{ name: 'Service', value: dedup.functionName }];
    const fnDims = [{ name: 'FunctionName', value: dedup.functionName }];
    const tableDims = (operation?: string) => [{ name: 'TableName', value: table.ref },
      ...(operation ? [{ name: 'Operation', value: operation }] : [])];
    const stat = (id: string, namespace: string, metricName: string,
      dimensions: cloudwatch.CfnAlarm.DimensionProperty[], s: string): cloudwatch.CfnAlarm.MetricDataQueryProperty =>
      ({ id, metricStat: { metric: { namespace, metricName, dimensions }, period: 60, stat: s }, returnData: false });
    const storeUnavailable = alarm('StoreUnavailableAlarm',
      'toolcall-dedup: the idempotency table does not answer, so every tool call fails closed (nothing runs). '
      + 'Runbook: docs/operations.md#store-unavailable', {
        namespace: METRICS_NAMESPACE, metricName: 'store_error', dimensions: service,
        statistic: 'Sum', period: 60, evaluationPeriods: 3, datapointsToAlarm: 2,
      });
    const configRejected = alarm('ConfigRejectedAlarm',
      'toolcall-dedup: a config document was refused; the last good one stays in force and the change pushed is '
      + 'not. Runbook: docs/operations.md#config-rejected', {
        namespace: METRICS_NAMESPACE, metricName: 'config_rejected', dimensions: service,
        statistic: 'Sum', period: 60,
      });
    const toolErrors = alarm('ToolErrorsAlarm',
      'toolcall-dedup: tools keep failing, timing out or cannot be reached (five a minute, three minutes in five). '
      + 'Runbook: docs/operations.md#tool-errors', {
        namespace: METRICS_NAMESPACE, metricName: 'tool_error', dimensions: service,
        statistic: 'Sum', period: 60, evaluationPeriods: 5, datapointsToAlarm: 3, threshold: 5,
      });
    const outcomeUnknown = alarm('OutcomeUnknownAlarm',
      'toolcall-dedup: an at-most-once call was left with its outcome unknown, or a repeat found one; repeats are '
      + 'refused until someone settles it (dedup list --state unknown). Runbook: docs/operations.md#outcome-unknown', {
        metrics: [
          stat('settled', METRICS_NAMESPACE, 'settled_unknown', service, 'Sum'),
          stat('refused', METRICS_NAMESPACE, 'outcome_unknown', service, 'Sum'),
          { id: 'unknown', label: 'Calls left unknown, and repeats refused for it',
            expression: 'FILL(settled, 0) + FILL(refused, 0)', returnData: true },
        ],
      });
    const sessionlessAlarm = alarm('SessionlessAlarm',
      'toolcall-dedup: Gateway calls arrive with no session and no run argument and run without dedup. '
      + 'Runbook: docs/operations.md#sessionless', {
        namespace: METRICS_NAMESPACE, metricName: 'sessionless', dimensions: service,
        statistic: 'Sum', period: 300,
      });
    const errors = alarm('ErrorsAlarm',
      "toolcall-dedup: the executor's invocations fail (Lambda errors). Gates deploys. "
      + 'Runbook: docs/operations.md#lambda-errors', {
        namespace: 'AWS/Lambda', metricName: 'Errors', dimensions: fnDims,
        statistic: 'Sum', period: 60, evaluationPeriods: 3, datapointsToAlarm: 2,
      });
    const throttles = alarm('ThrottlesAlarm',
      'toolcall-dedup: Lambda throttles the executor, so tool calls are not even tried. '
      + 'Runbook: docs/operations.md#throttles', {
        namespace: 'AWS/Lambda', metricName: 'Throttles', dimensions: fnDims, statistic: 'Sum', period: 60,
      });
    const duration = alarm('DurationNearTimeoutAlarm',
      "toolcall-dedup: the longest invocation takes over 80% of the executor's timeout; a slower tool will time "
      + 'out with its outcome unknown. Runbook: docs/operations.md#duration-near-timeout', {
        metrics: [
          stat('longest', 'AWS/Lambda', 'Duration', fnDims, 'Maximum'),
          { id: 'share', label: 'Longest invocation, percent of the timeout',
            expression: cdk.Fn.sub('longest / (${FunctionTimeout} * 10)'), returnData: true },
        ],
        threshold: 80, evaluationPeriods: 3, datapointsToAlarm: 2,
      });
    const tableThrottles = alarm('TableThrottlesAlarm',
      'toolcall-dedup: DynamoDB throttles the idempotency table; claims fail closed once their budget runs out. '
      + 'Runbook: docs/operations.md#table-throttles', {
        metrics: [
          stat('reads', 'AWS/DynamoDB', 'ReadThrottleEvents', tableDims(), 'Sum'),
          stat('writes', 'AWS/DynamoDB', 'WriteThrottleEvents', tableDims(), 'Sum'),
          { id: 'throttles', label: 'Throttled reads and writes',
            expression: 'FILL(reads, 0) + FILL(writes, 0)', returnData: true },
        ],
        evaluationPeriods: 3, datapointsToAlarm: 2,
      });
    const tableErrors = alarm('TableSystemErrorsAlarm',
      "toolcall-dedup: DynamoDB answers the executor's item requests with server errors. "
      + 'Runbook: docs/operations.md#table-system-errors', {
        metrics: [
          stat('get', 'AWS/DynamoDB', 'SystemErrors', tableDims('GetItem'), 'Sum'),
          stat('put', 'AWS/DynamoDB', 'SystemErrors', tableDims('PutItem'), 'Sum'),
          stat('update', 'AWS/DynamoDB', 'SystemErrors', tableDims('UpdateItem'), 'Sum'),
          stat('delete', 'AWS/DynamoDB', 'SystemErrors', tableDims('DeleteItem'), 'Sum'),
          { id: 'errors', label: 'Item requests answered with a server error',
            expression: 'FILL(get, 0) + FILL(put, 0) + FILL(update, 0) + FILL(delete, 0)', returnData: true },
        ],
        evaluationPeriods: 3, datapointsToAlarm: 2,
      });

    // ---- safe deploys: a version per deploy, the `live` alias shifted by CodeDeploy -------------
    // (what SAM's AutoPublishAlias + DeploymentPreference generate, resource for resource).
    const version = dedup.currentVersion.node.defaultChild as lambda.CfnVersion;
    version.cfnOptions.deletionPolicy = cdk.CfnDeletionPolicy.RETAIN;
    const application = new codedeploy.CfnApplication(this, 'ServerlessDeploymentApplication',
      { computePlatform: 'Lambda' });
    application.overrideLogicalId('ServerlessDeploymentApplication');
    const deployRole = new iam.CfnRole(this, 'CodeDeployServiceRole', {
      assumeRolePolicyDocument: {
        Version: '2012-10-17',
        Statement: [{ Action: ['sts:AssumeRole'], Effect: 'Allow', Principal: { Service: ['codedeploy.amazonaws.com'] } }],
      },
      managedPolicyArns: [`arn:${cdk.Aws.PARTITION}:iam::aws:policy/service-role/AWSCodeDeployRoleForLambda`],
    });
    deployRole.overrideLogicalId('CodeDeployServiceRole');
    const deploymentGroup = new codedeploy.CfnDeploymentGroup(this, 'DedupFunctionDeploymentGroup', {
      applicationName: application.ref,
      serviceRoleArn: deployRole.attrArn,
      alarmConfiguration: { enabled: true, alarms: [{ name: storeUnavailable.ref }, { name: errors.ref }] },
      autoRollbackConfiguration: {
        enabled: true, events: ['DEPLOYMENT_FAILURE', 'DEPLOYMENT_STOP_ON_ALARM', 'DEPLOYMENT_STOP_ON_REQUEST'],
      },
      deploymentConfigName: 'CodeDeployDefault.LambdaCanary10Percent5Minutes',
      deploymentStyle: { deploymentType: 'BLUE_GREEN', deploymentOption: 'WITH_TRAFFIC_CONTROL' },
    });
    deploymentGroup.overrideLogicalId('DedupFunctionDeploymentGroup');
    const liveAlias = new lambda.CfnAlias(this, 'DedupFunctionAliaslive', {
      name: 'live',
      functionName: dedup.functionName,
      functionVersion: version.attrVersion,
    });
    liveAlias.overrideLogicalId('DedupFunctionAliaslive');
    liveAlias.cfnOptions.updatePolicy = {
      codeDeployLambdaAliasUpdate: {
        applicationName: application.ref,
        deploymentGroupName: deploymentGroup.ref,
      },
    };
    const aliasArn = liveAlias.ref;
    this.aliasArn = aliasArn;

    const alarms = [storeUnavailable, outcomeUnknown, sessionlessAlarm, errors, throttles, duration,
      tableThrottles, tableErrors, configRejected, toolErrors];
    const own = (metric: string, extra?: object) =>
      [METRICS_NAMESPACE, metric, 'Service', '${DedupFunction}', ...(extra ? [extra] : [])];
    const search = (metric: string, id: string) => [{
      expression: `SEARCH('{${METRICS_NAMESPACE},Service,Door,Tool} MetricName="${metric}" Service="\${DedupFunction}"', 'Sum', 300)`,
      id,
    }];
    const graph = (x: number, y: number, title: string, rest: object) => ({
      type: 'metric', x, y, width: 12, height: 6,
      properties: { title, region: '${AWS::Region}', ...rest },
    });
    const body = {
      widgets: [
        { type: 'alarm', x: 0, y: 0, width: 24, height: 3, properties: {
          title: 'Alarms (runbook: docs/operations.md)',
          alarms: alarms.map((a) => `\${${a.logicalId}.Arn}`),
        } },
        graph(0, 3, 'Calls by outcome', { stat: 'Sum', period: 60, view: 'timeSeries',
          metrics: ['executed', 'replayed', 'waited', 'in_progress', 'store_error', 'settled_unknown', 'outcome_unknown',
            'sessionless', 'shadow_replay', 'tool_error']
            .map((m) => own(m)) }),
        graph(12, 3, 'Replays by door and tool', { view: 'timeSeries', metrics: [search('replayed', 'replays')] }),
        graph(0, 9, 'Executions by door and tool', { view: 'timeSeries', metrics: [search('executed', 'executions')] }),
        graph(12, 9, 'Latency (ms)', { period: 60, view: 'timeSeries', metrics: [
          own('latency_ms', { stat: 'p50' }), own('latency_ms', { stat: 'p99' }),
          ['AWS/Lambda', 'Duration', 'FunctionName', '${DedupFunction}', { stat: 'Maximum' }]] }),
        graph(0, 15, 'Executor invocations', { period: 60, view: 'timeSeries', metrics: [
          ['AWS/Lambda', 'Invocations', 'FunctionName', '${DedupFunction}', { stat: 'Sum' }],
          ['AWS/Lambda', 'Errors', 'FunctionName', '${DedupFunction}', { stat: 'Sum' }],
          ['AWS/Lambda', 'Throttles', 'FunctionName', '${DedupFunction}', { stat: 'Sum' }],
          ['AWS/Lambda', 'ConcurrentExecutions', 'FunctionName', '${DedupFunction}', { stat: 'Maximum' }]] }),
        graph(12, 15, 'Idempotency table', { period: 60, view: 'timeSeries', metrics: [
          ['AWS/DynamoDB', 'ConsumedWriteCapacityUnits', 'TableName', '${IdempotencyTable}', { stat: 'Sum' }],
          ['AWS/DynamoDB', 'ConsumedReadCapacityUnits', 'TableName', '${IdempotencyTable}', { stat: 'Sum' }],
          ['AWS/DynamoDB', 'WriteThrottleEvents', 'TableName', '${IdempotencyTable}', { stat: 'Sum' }],
          ['AWS/DynamoDB', 'ReadThrottleEvents', 'TableName', '${IdempotencyTable}', { stat: 'Sum' }],
          own('store_requests', { stat: 'Sum' })] }),
      ],
    };
    const dashboard = new cloudwatch.CfnDashboard(this, 'Dashboard', {
      dashboardName: `${cdk.Aws.STACK_NAME}-${cdk.Aws.REGION}`,
      dashboardBody: cdk.Fn.sub(JSON.stringify(body)),
    });
    dashboard.overrideLogicalId('Dashboard');

    // ---- the sweep: unsettled at-most-once claims, every five minutes (docs/operations.md) ----
    const sweep = new events.CfnRule(this, 'SweepSchedule', {
      description: 'toolcall-dedup sweep of unsettled at-most-once claims',
      scheduleExpression: 'rate(5 minutes)',
      state: 'ENABLED',
      targets: [{ id: 'sweep', arn: aliasArn, input: '{"toolcall-dedup": "sweep"}' }],
    });
    sweep.overrideLogicalId('SweepSchedule');
    const sweepPerm = new lambda.CfnPermission(this, 'SweepInvokePermission', {
      action: 'lambda:InvokeFunction',
      functionName: aliasArn,
      principal: 'events.amazonaws.com',
      sourceAccount: cdk.Aws.ACCOUNT_ID,
      sourceArn: sweep.attrArn,
    });
    sweepPerm.overrideLogicalId('SweepInvokePermission');

    // ---- Bedrock -> executor permissions -------------------------------------------------
    const agentPerm = new lambda.CfnPermission(this, 'AgentInvokePermission', {
      action: 'lambda:InvokeFunction',
      functionName: aliasArn,
      principal: 'bedrock.amazonaws.com',
      sourceAccount: cdk.Fn.select(4, cdk.Fn.split(':', agentArn.valueAsString)),
      sourceArn: agentArn.valueAsString,
    });
    agentPerm.overrideLogicalId('AgentInvokePermission');
    agentPerm.cfnOptions.condition = hasAgentArn;
    // The synth-time validator does not evaluate conditions: it checks the
    // AgentArn default '' against SourceArn's pattern although this resource
    // only exists when AgentArn is not empty (cfn-lint proper is quiet).
    const falsePositive = {
      id: 'CloudFormation-Validate::W1030',
      reason: 'AgentInvokePermission exists only under HasAgentArn, so SourceArn is never the empty default',
    };
    Validations.of(this).acknowledge(falsePositive);

    // ---- AgentCore Gateway -> executor (Lambda target) permission ---------------------------------
    const gatewayPerm = new lambda.CfnPermission(this, 'AgentCoreGatewayInvokePermission', {
      action: 'lambda:InvokeFunction',
      functionName: aliasArn,
      principal: 'bedrock-agentcore.amazonaws.com',
      sourceAccount: cdk.Fn.select(4, cdk.Fn.split(':', gatewayArn.valueAsString)),
      sourceArn: gatewayArn.valueAsString,
    });
    gatewayPerm.overrideLogicalId('AgentCoreGatewayInvokePermission');
    gatewayPerm.cfnOptions.condition = hasGateway;

    // ---- optional gateway with the executor as its interceptor --------------------------------
    // The interceptor door's own alias (DEDUP_INTERCEPTOR_ALIAS), on the version the deploy published:
    // one alias per trust domain. It moves at deploy time; CodeDeploy shifts `live` only.
    const interceptorAlias = new lambda.CfnAlias(this, 'InterceptorAlias', {
      name: 'interceptor',
      description: "The AgentCore Gateway interceptor's door, and no other",
      functionName: dedup.functionName,
      functionVersion: version.attrVersion,
    });
    interceptorAlias.overrideLogicalId('InterceptorAlias');
    interceptorAlias.cfnOptions.condition = interceptorOn;
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

    const demoPerm = new lambda.CfnPermission(this, 'DemoAgentInvokePermission', {
      action: 'lambda:InvokeFunction',
      functionName: aliasArn,
      principal: 'bedrock.amazonaws.com',
      sourceAccount: cdk.Aws.ACCOUNT_ID,
      sourceArn: agent.attrAgentArn,
    });
    demoPerm.overrideLogicalId('DemoAgentInvokePermission');
    demoPerm.cfnOptions.condition = demoAgentOn;

    // ---- outputs --------------------------------------------------------------------------------
    const out = (id: string, value: string, condition?: cdk.CfnCondition, description?: string) =>
      new cdk.CfnOutput(this, id, { value, condition, description });
    out('DedupFunctionName', dedup.functionName, undefined, 'Executor to set as the action-group Lambda of your agent');
    out('DedupFunctionArn', dedup.functionArn, undefined, "The function's unqualified ARN (invoke the alias instead)");
    out('DedupFunctionAliasArn', aliasArn, undefined,
      'ARN for ActionGroupExecutor.Lambda and Gateway targets (the live alias deploys shift gradually)');
    out('DashboardUrl',
      `https://${cdk.Aws.REGION}.console.aws.amazon.com/cloudwatch/home?region=${cdk.Aws.REGION}#dashboards/dashboard/${dashboard.ref}`,
      undefined, "The operator's dashboard");
    out('DedupFunctionRoleArn', dedupRole.roleArn);
    out('DemoToolFunctionName', demoTool.functionName);
    out('DemoToolFunctionArn', demoTool.functionArn);
    out('IdempotencyTableName', table.ref);
    out('IdempotencyTableArn', table.attrArn);
    out('ResultsBucketName', bucket.ref, resultsOn, 'Bucket holding replies past the DynamoDB item limit (DEDUP_RESULTS_BUCKET)');
    out('InterceptorGatewayUrl', gateway.attrGatewayUrl, interceptorOn, 'MCP endpoint of the gateway the executor intercepts');
    out('DemoAgentId', agent.attrAgentId, demoAgentOn);
    out('DemoAgentArn', agent.attrAgentArn, demoAgentOn);
    out('DemoAgentAliasId', alias.attrAgentAliasId, demoAgentOn, 'Use with InvokeAgent --agent-alias-id');
  }
}
