// ToolcallDedup: the toolcall-dedup executor with everything it needs (idempotency table, results
// bucket, config document, IAM, alarms, dashboard, sweep, gradual deploys) as one construct a CDK
// app imports (issue 53).
//
// The example stack (toolcall-dedup-stack.ts) is built through this construct and kept equal to
// infra/template.yaml by scripts/compare_stacks.py. That is why a few props also take a
// `WhenCondition` (a value plus a CfnCondition): a CfnParameter-driven stack decides those at deploy
// time, as the SAM template does. An app with plain values never needs one.
import * as path from 'path';
import * as cdk from 'aws-cdk-lib';
import { Construct } from 'constructs';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as codedeploy from 'aws-cdk-lib/aws-codedeploy';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { RustFunction } from 'cargo-lambda-cdk';

/** Cargo manifest of the crate that holds the executor (the repository root). */
const MANIFEST = path.resolve(__dirname, '..', '..', '..', 'Cargo.toml');
/** Fixed (the config document holds the behaviour): docs/configuration.md. */
const METRICS_NAMESPACE = 'ToolcallDedup';
const RESULTS_RETENTION_DAYS = 32;
const LOG_RETENTION_DAYS = 30;
/** What the executor does with a tool: invoke it, and read its timeout when the route states none. */
const TOOL_ACTIONS = ['lambda:InvokeFunction', 'lambda:GetFunctionConfiguration'];
/** The tag that lets the executor invoke a function it was not given (attribute-based access). */
export const TOOL_TAG = 'toolcall-dedup:tool';

/** DEDUP_MODE: `shadow` only reports what it would have deduplicated; `enforce` deduplicates. */
export type DedupMode = 'shadow' | 'enforce' | 'off';

/** An entry point of the executor (DEDUP_DOORS): it answers only the doors it is told it serves. */
export type Door = 'bedrock' | 'agentcore' | 'interceptor' | 'envelope';

/** The metrics the executor emits (EMF), one Count per outcome: what metricOutcome() takes. */
export type Outcome = 'executed' | 'replayed' | 'waited' | 'in_progress' | 'store_error' | 'outcome_unknown'
  | 'sessionless' | 'tool_error' | 'bad_request' | 'dedup_off' | 'passed_unread' | 'door_refused'
  | 'shadow_replay' | 'passed_on' | 'idempotency_key_reused';

/**
 * A value that applies only where a CloudFormation condition holds: for stacks that decide at
 * deploy time from CfnParameters (the SAM-parity example stack). Apps with plain values do not need it.
 */
export interface WhenCondition<T> {
  readonly value: T;
  readonly onlyIf: cdk.CfnCondition;
  /**
   * Where the alternative (if the prop has one) is built. CloudFormation needs it as a named
   * condition; default: one this construct creates, the negation of `onlyIf`.
   */
  readonly otherwiseIf?: cdk.CfnCondition;
}

/** A tool the executor routes to. */
export interface ToolRoute {
  /** The tool's function. The executor may invoke it (and its versions and aliases): no tag needed. */
  readonly function: lambda.IFunction;
  /** The route's `timeout_seconds` in the generated document. Default: the function's own timeout, read at run time. */
  readonly timeout?: cdk.Duration;
}

/** Where the executor reads its config document (DEDUP_CONFIG; docs/configuration.md). */
export class ConfigSource {
  /** An SSM parameter (String): the role may ssm:GetParameter it, and nothing else in SSM. */
  public static ssmParameter(parameterName: string): ConfigSource {
    // A parameter's ARN is parameter/<name> for `name` and parameter/<path> for `/path`.
    const slash = cdk.Token.isUnresolved(parameterName) || parameterName.startsWith('/') ? '' : '/';
    return new ConfigSource(`ssm:${parameterName}`, {
      Sid: 'ReadConfigDocument', Effect: 'Allow', Action: 'ssm:GetParameter',
      Resource: `arn:${cdk.Aws.PARTITION}:ssm:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:parameter${slash}${parameterName}`,
    }, parameterName);
  }

  /** An S3 object, `s3://bucket/key` (literal): the role may s3:GetObject that object only. */
  public static s3(uri: string): ConfigSource {
    const m = cdk.Token.isUnresolved(uri) ? null : /^s3:\/\/([^/]+)\/(.+)$/.exec(uri);
    if (!m) {
      throw new Error(`ConfigSource.s3: want s3://bucket/key, got ${uri} (use ConfigSource.s3Object for tokens)`);
    }
    return ConfigSource.s3Object(m[1], m[2]);
  }

  /**
   * An S3 object by bucket name and key (either may be a token). A bucket encrypted with a customer
   * KMS key also needs kms:Decrypt for the role (`toolcallDedup.role`), which this does not grant.
   */
  public static s3Object(bucketName: string, key: string): ConfigSource {
    return new ConfigSource(`s3://${bucketName}/${key}`, {
      Sid: 'ReadConfigDocument', Effect: 'Allow', Action: 's3:GetObject',
      Resource: `arn:${cdk.Aws.PARTITION}:s3:::${bucketName}/${key}`,
    });
  }

  /**
   * An S3 object named by a whole `s3://bucket/key` URI that may be a token (a stack parameter): the
   * role may s3:GetObject that object only.
   */
  public static s3Uri(uri: string): ConfigSource {
    // `bucket/key`: what follows `s3://` (the appended `s3://` keeps the split two items long even
    // for an empty value, which a condition leaves unused).
    const object = cdk.Fn.select(1, cdk.Fn.split('s3://', cdk.Fn.join('', [uri, 's3://'])));
    return new ConfigSource(uri, {
      Sid: 'ReadConfigDocumentObject', Effect: 'Allow', Action: 's3:GetObject',
      Resource: `arn:${cdk.Aws.PARTITION}:s3:::${object}`,
    });
  }

  /**
   * An SSM parameter this construct creates (`/<stack name>/config`), routing the `tools` given: the
   * default. Edit it after deploy (`dedup config check` first); the stack does not overwrite it
   * unless the tools change.
   */
  public static generated(): ConfigSource {
    return new ConfigSource(undefined, undefined);
  }

  private constructor(
    /** DEDUP_CONFIG; undefined for the generated document. */
    public readonly location: string | undefined,
    /** The one statement that lets the role read the document. */
    public readonly readStatement: Record<string, unknown> | undefined,
    /** For an SSM source: the parameter name. */
    public readonly ssmParameterName?: string,
  ) {}
}

export interface ToolcallDedupProps {
  /** DEDUP_MODE, which wins over the document's. Start with `shadow`, watch `shadow_replay`, then `enforce`. */
  readonly mode: DedupMode;
  /**
   * The tools to route, by the name the agent calls them (`*` for every other tool), and their
   * functions. The executor is granted invoke on each function. With the generated config document
   * these are its routes; with your own document they are only granted (the routes are the document's).
   * @default none
   */
  readonly tools?: Record<string, ToolRoute>;
  /**
   * Also let the executor invoke any function of this account and region tagged
   * `toolcall-dedup:tool=true` (for tools routed by the document but not given here).
   * @default true
   */
  readonly invokeTaggedTools?: boolean;
  /**
   * The config document. With a `WhenCondition`, `value` (an SSM parameter) applies where
   * `onlyIf` holds and the generated document (built under `otherwiseIf`) elsewhere.
   * @default ConfigSource.generated()
   */
  readonly config?: ConfigSource | WhenCondition<ConfigSource>;
  /**
   * A source read instead of `config` where its condition holds (a stack parameter that may name
   * an `s3://` document), the role allowed to read it there.
   */
  readonly configOverride?: WhenCondition<ConfigSource>;
  /** SNS topic the alarms notify, on alarm and on recovery. @default none (see alarmEmail) */
  readonly alarmTopic?: sns.ITopic | WhenCondition<sns.ITopic>;
  /**
   * An address subscribed to the alarms: to `alarmTopic`, or to a topic created for it. With neither,
   * the alarms notify no one and synth warns so.
   * @default none
   */
  readonly alarmEmail?: string;
  /** Memory (MB) of the executor. @default 256 */
  readonly memorySize?: number;
  /** Timeout of the executor; give it the slowest tool plus a margin. @default 30 s */
  readonly timeout?: cdk.Duration;
  /** Reserved concurrent executions; 0 = unreserved (docs/operations.md sizes it). @default unreserved */
  readonly reservedConcurrency?: number | WhenCondition<number>;
  /**
   * A bucket for tool replies past DynamoDB's 400 KB item limit. false: such replies are not stored
   * (repeats are told the call already ran). A CfnCondition creates it where the condition holds.
   * @default true
   */
  readonly resultsBucket?: boolean | cdk.CfnCondition;
  /**
   * The doors this executor serves (DEDUP_DOORS). `interceptor` also creates the `interceptor` alias
   * an AgentCore Gateway's interceptor configuration invokes ({@link ToolcallDedup.interceptorAlias}).
   * @default ['bedrock']
   */
  readonly doors?: (Door | WhenCondition<Door>)[];
  /** DEDUP_ENVELOPE_NAMESPACES: the namespaces an invoke-envelope caller may name. @default any */
  readonly envelopeNamespaces?: string[];
  /** The executor's code, e.g. `Code.fromAsset('target/lambda/toolcall-dedup/bootstrap.zip')`. @default built from `manifestPath` */
  readonly code?: lambda.Code;
  /** The crate to build with cargo-lambda when no `code` is given. @default this repository's Cargo.toml */
  readonly manifestPath?: string;
  /** @default `<stack name>-<region>` */
  readonly dashboardName?: string;
}

/**
 * Acknowledge findings of policy validation (cdk-nag v3 reads CDK's own `Validations` API), each with
 * its one-line reason. No cdk-nag import: apps without cdk-nag do not need it.
 */
export function acknowledge(scope: Construct, findings: { id: string; reason: string }[]): void {
  for (const finding of findings) cdk.Validations.of(scope).acknowledge(finding);
}

/** cdk-nag's name for an AWS managed policy finding (AwsSolutions-IAM4). */
function nagPolicy(name: string): string {
  return `AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/${name}]`;
}

/** A resolved CloudFormation value as cdk-nag writes it in a finding's name (its flattenCfnReference). */
function nagFlatten(node: any): string {
  if (node === undefined) return '';
  if (typeof node === 'string') return node.replace(/\$\{/g, '<').replace(/}/g, '>');
  if (node['Fn::Join']) return node['Fn::Join'][1].map(nagFlatten).join(node['Fn::Join'][0]);
  if (node['Fn::Sub']) return nagFlatten(node['Fn::Sub']);
  if (node['Fn::GetAtt']) return `<${nagFlatten(node['Fn::GetAtt'][0])}.${nagFlatten(node['Fn::GetAtt'][1])}>`;
  if (node['Fn::ImportValue']) return nagFlatten(node['Fn::ImportValue']);
  if (node.Ref) return `<${nagFlatten(node.Ref)}>`;
  return JSON.stringify(node);
}

/** `value` where `onlyIf` holds, else `otherwise`; just `value` without a condition. */
function when(onlyIf: cdk.CfnCondition | undefined, value: unknown, otherwise: unknown = cdk.Aws.NO_VALUE): any {
  return onlyIf ? cdk.Fn.conditionIf(onlyIf.logicalId, value, otherwise) : value;
}

function isWhen<T>(v: T | WhenCondition<T>): v is WhenCondition<T> {
  return typeof v === 'object' && v !== null && 'onlyIf' in v && 'value' in v;
}

function unwrap<T>(v: T | WhenCondition<T>): { value: T; onlyIf?: cdk.CfnCondition; otherwiseIf?: cdk.CfnCondition } {
  return isWhen(v) ? v : { value: v };
}

/**
 * An Fn::Sub of `text`, whose tokens are written `${LogicalId}` / `${LogicalId.Attr}` (or as named
 * variables when they are other expressions). Resolved when the template is written, so the
 * logical ids are the final ones (a stack may override them after this construct is built); the
 * dashboard body and the generated document stay one readable string, as in template.yaml.
 */
function lazySub(text: string): string {
  return cdk.Token.asString(cdk.Lazy.uncachedAny({
    produce: (ctx: cdk.IResolveContext) => {
      const variables: Record<string, unknown> = {};
      const body = cdk.Tokenization.reverseString(text).mapTokens({
        mapToken: (t) => {
          const v = ctx.resolve(t);
          if (typeof v === 'string' || typeof v === 'number') return String(v);
          if (typeof v?.Ref === 'string') return `\${${v.Ref}}`;
          if (Array.isArray(v?.['Fn::GetAtt'])) return `\${${v['Fn::GetAtt'].join('.')}}`;
          const name = `V${Object.keys(variables).length}`;
          variables[name] = v;
          return `\${${name}}`;
        },
      }).join({ join: (left: unknown, right: unknown) => `${left ?? ''}${right ?? ''}` });
      return { 'Fn::Sub': Object.keys(variables).length ? [body, variables] : body };
    },
  }));
}

/**
 * The toolcall-dedup executor: a Lambda function (invoke its `live` alias, {@link aliasArn}) that
 * runs each tool call once, with its idempotency table, config document, alarms and dashboard.
 */
export class ToolcallDedup extends Construct {
  /** The idempotency table. */
  public readonly table: dynamodb.CfnTable;
  /** The executor. Agents and gateways invoke its `live` alias ({@link aliasArn}), never this. */
  public readonly dedupFunction: lambda.Function;
  /** The executor's role. */
  public readonly role: iam.Role;
  /** The `live` alias deploys shift gradually (CodeDeploy), which agents and gateways invoke. */
  public readonly liveAlias: lambda.CfnAlias;
  /** ARN of {@link liveAlias}. */
  public readonly aliasArn: string;
  /** The interceptor door's own alias, when `doors` names `interceptor`. */
  public readonly interceptorAlias?: lambda.CfnAlias;
  /** The results bucket, unless `resultsBucket: false`. */
  public readonly resultsBucket?: s3.CfnBucket;
  /** The generated config document's parameter, unless the document is yours. */
  public readonly configParameter?: ssm.CfnParameter;
  /** DEDUP_CONFIG: where the executor reads its document. */
  public readonly configLocation: string;
  /** The topic the alarms notify, when there is one. */
  public readonly alarmTopic?: sns.ITopic;
  /** Every alarm; the first two gate deploys. */
  public readonly alarms: cloudwatch.CfnAlarm[];
  public readonly dashboard: cloudwatch.CfnDashboard;

  constructor(scope: Construct, id: string, props: ToolcallDedupProps) {
    super(scope, id);
    if (!cdk.Token.isUnresolved(props.mode) && !['shadow', 'enforce', 'off'].includes(props.mode)) {
      throw new Error(`ToolcallDedup: mode must be shadow, enforce or off, not ${props.mode}`);
    }
    const tools = Object.entries(props.tools ?? {});
    const timeout = props.timeout ?? cdk.Duration.seconds(30);
    const retain = (r: cdk.CfnResource) => {
      r.cfnOptions.deletionPolicy = cdk.CfnDeletionPolicy.RETAIN;
      r.cfnOptions.updateReplacePolicy = cdk.CfnDeletionPolicy.RETAIN;
    };

    // ---- idempotency table ------------------------------------------------------------------
    // L1: the shape template.yaml declares, property for property (compare_stacks checks it).
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
    retain(table);
    this.table = table;

    // ---- results bucket (replies past the DynamoDB item limit) ---------------------------------
    // The executor writes results/<key>/<lease token> and reads it back; the lifecycle rule expires
    // the objects (the function checks it covers every TTL).
    const resultsOption = props.resultsBucket ?? true;
    const resultsIf = resultsOption instanceof cdk.CfnCondition ? resultsOption : undefined;
    let bucket: s3.CfnBucket | undefined;
    if (resultsOption !== false) {
      bucket = new s3.CfnBucket(this, 'ResultsBucket', {
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
      bucket.cfnOptions.condition = resultsIf;
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
      bucketPolicy.cfnOptions.condition = resultsIf;
      acknowledge(bucket, [{
        id: 'AwsSolutions::AwsSolutions-S1',
        reason: 'Only the executor reads and writes it, under results/, and objects expire; its role is the audit trail',
      }]);
    }
    this.resultsBucket = bucket;

    // ---- the config document -------------------------------------------------------------------
    const config = unwrap<ConfigSource>(props.config ?? ConfigSource.generated());
    if (config.onlyIf && config.value.ssmParameterName === undefined) {
      throw new Error('ToolcallDedup: a conditional config must be an SSM parameter (the generated one is the alternative)');
    }
    let source = config.value;
    if (source.location === undefined || config.onlyIf) {
      if (tools.length === 0) {
        throw new Error('ToolcallDedup: the generated config document routes `tools`: give tools, or a config');
      }
      // Routes of the generated document: every tool given, its timeout stated when given.
      const routes = tools.map(([name, route]) => {
        const t = route.timeout ? `, timeout_seconds: ${cdk.Token.asString(route.timeout.toSeconds())}` : '';
        return `  ${JSON.stringify(name)}: {function: "${route.function.functionName}"${t}}`;
      });
      const parameter = new ssm.CfnParameter(this, 'ConfigParameter', {
        name: `/${cdk.Aws.STACK_NAME}/config`,
        type: 'String',
        tier: 'Intelligent-Tiering',
        description: 'toolcall-dedup config document (docs/configuration.md)',
        value: lazySub([
          '# toolcall-dedup config document: routes, settings, key policies, schemas.',
          '# Check an edit with `dedup config check FILE`, then put it here.',
          'routes:',
          ...routes,
          '',
        ].join('\n')),
      });
      this.configParameter = parameter;
      if (config.onlyIf) {
        parameter.cfnOptions.condition = config.otherwiseIf ?? new cdk.CfnCondition(this, 'GeneratedConfig', {
          expression: cdk.Fn.conditionNot(config.onlyIf),
        });
        // Either parameter, one statement: the role reads exactly the one in force.
        source = ConfigSource.ssmParameter(cdk.Token.asString(
          when(config.onlyIf, config.value.ssmParameterName, parameter.ref)));
      } else {
        source = ConfigSource.ssmParameter(parameter.ref);
      }
    }
    const override = props.configOverride;
    this.configLocation = override
      ? cdk.Token.asString(when(override.onlyIf, override.value.location, source.location))
      : source.location!;

    // ---- the executor's role -------------------------------------------------------------------
    const role = new iam.Role(this, 'DedupFunctionRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      managedPolicies: [
        iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AWSLambdaBasicExecutionRole'),
        // X-Ray as SAM sets it for Tracing: Active (the managed policy, not CDK's inline statement).
        iam.ManagedPolicy.fromAwsManagedPolicyName('AWSXrayWriteOnlyAccess'),
      ],
    });
    this.role = role;
    // Written as the L1's policy (not PolicyStatements): a statement may be an Fn::If, as in
    // template.yaml, and cdk-nag reads the L1 properties.
    const toolArns = [...new Set(tools.map(([, r]) => r.function.functionArn))];
    const statements: unknown[] = [
      {
        Sid: 'IdempotencyItems', Effect: 'Allow',
        Action: ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem'],
        Resource: table.attrArn,
      },
      // The tools given: their versions and aliases too (a route may name one).
      ...(toolArns.length ? [{
        Sid: 'InvokeGivenTools', Effect: 'Allow', Action: TOOL_ACTIONS,
        Resource: toolArns.flatMap((arn) => [arn, `${arn}:*`]),
      }] : []),
      // Tools the document routes but this construct was not given: tagged, in this account and region.
      ...((props.invokeTaggedTools ?? true) ? [{
        Sid: 'InvokeTaggedTools', Effect: 'Allow', Action: TOOL_ACTIONS,
        Resource: `arn:${cdk.Aws.PARTITION}:lambda:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:function:*`,
        Condition: { StringEquals: { [`aws:ResourceTag/${TOOL_TAG}`]: 'true' } },
      }] : []),
      source.readStatement,
      ...(override ? [when(override.onlyIf, override.value.readStatement)] : []),
      // Each call left with its outcome unknown is announced on the default bus (docs/operations.md).
      {
        Sid: 'AnnounceUnknownOutcomes', Effect: 'Allow', Action: 'events:PutEvents',
        Resource: `arn:${cdk.Aws.PARTITION}:events:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:event-bus/default`,
      },
      // Offloaded results: write and read under results/ only (no list, no delete: the lifecycle expires them).
      ...(bucket ? [when(resultsIf, {
        Sid: 'ResultObjects', Effect: 'Allow', Action: ['s3:GetObject', 's3:PutObject'],
        Resource: `${bucket.attrArn}/results/*`,
      })] : []),
    ];
    const cfnRole = role.node.defaultChild as iam.CfnRole;
    cfnRole.policies = [{
      policyName: 'DedupFunctionRolePolicy0',
      policyDocument: { Version: '2012-10-17', Statement: statements },
    }];
    acknowledge(role, [
      { id: nagPolicy('service-role/AWSLambdaBasicExecutionRole'), reason: 'Writes its own logs only; what SAM attaches' },
      { id: nagPolicy('AWSXrayWriteOnlyAccess'), reason: 'Writes trace segments only; what SAM attaches for Tracing: Active' },
    ]);
    // The wildcards of the statements above, each acknowledged by the name cdk-nag gives it, which
    // holds the final logical ids: known when the app is synthesized, not now.
    const wildcards: [string, string][] = [
      ...toolArns.map((arn): [string, string] => [`${arn}:*`, "A given tool's versions and aliases, which a route may name"]),
      [`arn:${cdk.Aws.PARTITION}:lambda:${cdk.Aws.REGION}:${cdk.Aws.ACCOUNT_ID}:function:*`,
        'Bound by its condition to functions tagged toolcall-dedup:tool=true (tools the document routes)'],
      ...(bucket ? [[`${bucket.attrArn}/results/*`, 'Result objects, one per call, under results/ of its own bucket']] as [string, string][] : []),
    ];
    cdk.Aspects.of(this).add({
      visit: (node) => {
        if (node !== this) return;
        const stack = cdk.Stack.of(this);
        acknowledge(role, wildcards.map(([resource, reason]) =>
          ({ id: `AwsSolutions::AwsSolutions-IAM5[Resource::${nagFlatten(stack.resolve(resource))}]`, reason })));
      },
    });

    // ---- the executor ----------------------------------------------------------------------------
    const logGroup = new logs.CfnLogGroup(this, 'DedupLogGroup', { retentionInDays: LOG_RETENTION_DAYS });
    retain(logGroup);
    const reserved = props.reservedConcurrency === undefined ? undefined : unwrap(props.reservedConcurrency);
    const doors = (props.doors ?? ['bedrock']).map((d) => unwrap<Door>(d));
    const interceptor = doors.find((d) => d.value === 'interceptor');
    const functionOptions: lambda.FunctionOptions = {
      architecture: lambda.Architecture.ARM_64,
      description: 'Bedrock action-group executor that deduplicates tool calls',
      memorySize: props.memorySize ?? 256,
      timeout,
      role,
      loggingFormat: lambda.LoggingFormat.JSON,
      applicationLogLevelV2: lambda.ApplicationLogLevel.INFO,
      systemLogLevelV2: lambda.SystemLogLevel.WARN,
      logGroup: logs.LogGroup.fromLogGroupName(this, 'DedupLogGroupRef', logGroup.ref),
      environment: {
        // The wiring: what the stack built and decides. Everything else is the document's.
        DEDUP_TABLE_NAME: table.ref,
        DEDUP_KEY_ATTRIBUTE: 'pk',
        DEDUP_TTL_ATTRIBUTE: 'expires_at',
        DEDUP_CONFIG: this.configLocation,
        DEDUP_MODE: props.mode,
        DEDUP_METRICS_NAMESPACE: METRICS_NAMESPACE,
        DEDUP_ENVELOPE_NAMESPACES: (props.envelopeNamespaces ?? []).join(','),
        // The doors this stack wires, and no other ('none' keeps the list valid when all are off).
        DEDUP_DOORS: cdk.Fn.join(',', ['none', ...doors.map((d) => cdk.Token.asString(when(d.onlyIf, d.value, 'none')))]),
        // The interceptor door answers through its own alias only, and that alias nothing else:
        // no envelope invoker can write a catalog with a forged tools/list RESPONSE.
        ...(interceptor ? { DEDUP_INTERCEPTOR_ALIAS: cdk.Token.asString(when(interceptor.onlyIf, 'interceptor')) } : {}),
        // Empty = no offload: a reply past the item limit is not stored.
        DEDUP_RESULTS_BUCKET: bucket ? cdk.Token.asString(when(resultsIf, bucket.ref, '')) : '',
        DEDUP_RESULTS_RETENTION_DAYS: String(RESULTS_RETENTION_DAYS),
        DEDUP_EVENT_BUS: 'default',
      },
    };
    const fn = props.code
      ? new lambda.Function(this, 'DedupFunction', {
        ...functionOptions, code: props.code, runtime: lambda.Runtime.PROVIDED_AL2023, handler: 'bootstrap',
      })
      : new RustFunction(this, 'DedupFunction', {
        ...functionOptions, manifestPath: props.manifestPath ?? MANIFEST, binaryName: 'toolcall-dedup',
      });
    this.dedupFunction = fn;
    // X-Ray (the stages as subsegments) and reserved concurrency, set on the L1 as SAM sets them.
    const cfnFn = fn.node.defaultChild as lambda.CfnFunction;
    cfnFn.tracingConfig = { mode: 'Active' };
    if (reserved && !(reserved.onlyIf === undefined && reserved.value === 0)) {
      cfnFn.addPropertyOverride('ReservedConcurrentExecutions', when(reserved.onlyIf, reserved.value));
    }

    // ---- safe deploys: a version per deploy, the `live` alias shifted by CodeDeploy ------------------
    // (what SAM's AutoPublishAlias + DeploymentPreference generate, resource for resource).
    const version = fn.currentVersion.node.defaultChild as lambda.CfnVersion;
    retain(version);
    const application = new codedeploy.CfnApplication(this, 'ServerlessDeploymentApplication',
      { computePlatform: 'Lambda' });
    const deployRole = new iam.CfnRole(this, 'CodeDeployServiceRole', {
      assumeRolePolicyDocument: {
        Version: '2012-10-17',
        Statement: [{ Action: ['sts:AssumeRole'], Effect: 'Allow', Principal: { Service: ['codedeploy.amazonaws.com'] } }],
      },
      managedPolicyArns: [`arn:${cdk.Aws.PARTITION}:iam::aws:policy/service-role/AWSCodeDeployRoleForLambda`],
    });
    acknowledge(deployRole, [{
      id: nagPolicy('service-role/AWSCodeDeployRoleForLambda'), reason: "AWSCodeDeployRoleForLambda is CodeDeploy's own policy for Lambda traffic shifting, as SAM attaches it",
    }]);

    // ---- alarms (docs/operations.md) --------------------------------------------------------------
    const topicChoice = props.alarmTopic === undefined ? undefined : unwrap(props.alarmTopic);
    let topic = topicChoice?.value;
    if (props.alarmEmail !== undefined) {
      if (topicChoice?.onlyIf) throw new Error('ToolcallDedup: alarmEmail needs an unconditional alarmTopic, or none');
      if (!topic) {
        const created = new sns.Topic(this, 'AlarmTopic', { displayName: 'toolcall-dedup alarms', enforceSSL: true });
        acknowledge(created, [{
          id: 'AwsSolutions::AwsSolutions-SNS2',
          reason: 'Alarm notifications carry names and states, no data; a KMS key would also need a key policy for CloudWatch',
        }]);
        topic = created;
      }
      topic.addSubscription(new subscriptions.EmailSubscription(props.alarmEmail));
    }
    this.alarmTopic = topic;
    if (!topic) {
      cdk.Annotations.of(this).addWarningV2('toolcall-dedup:no-alarm-notification',
        'toolcall-dedup: NO ONE IS NOTIFIED of its alarms (store down, outcomes unknown, config refused, tool '
        + 'errors): give alarmTopic or alarmEmail.');
    }
    const notify = topic ? cdk.Token.asList(when(topicChoice?.onlyIf, [topic.topicArn])) : undefined;
    const alarm = (id: string, description: string, p: Partial<cloudwatch.CfnAlarmProps>) =>
      new cloudwatch.CfnAlarm(this, id, {
        alarmDescription: description,
        comparisonOperator: 'GreaterThanOrEqualToThreshold',
        treatMissingData: 'notBreaching',
        threshold: 1,
        evaluationPeriods: 1,
        alarmActions: notify,
        okActions: notify,
        ...p,
      });
    const service = [{ name: 'Service', value: fn.functionName }];
    const fnDims = [{ name: 'FunctionName', value: fn.functionName }];
    const tableDims = (operation?: string) => [{ name: 'TableName', value: table.ref },
      ...(operation ? [{ name: 'Operation', value: operation }] : [])];
    const stat = (qid: string, namespace: string, metricName: string,
      dimensions: cloudwatch.CfnAlarm.DimensionProperty[], s: string): cloudwatch.CfnAlarm.MetricDataQueryProperty =>
      ({ id: qid, metricStat: { metric: { namespace, metricName, dimensions }, period: 60, stat: s }, returnData: false });
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
    const sessionless = alarm('SessionlessAlarm',
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
            expression: lazySub(`longest / (${cdk.Token.asString(timeout.toSeconds())} * 10)`), returnData: true },
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
    this.alarms = [storeUnavailable, outcomeUnknown, sessionless, errors, throttles, duration,
      tableThrottles, tableErrors, configRejected, toolErrors];

    // ---- the deployment group rolls back on the store and error alarms -----------------------------
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
    const liveAlias = new lambda.CfnAlias(this, 'DedupFunctionAliaslive', {
      name: 'live',
      functionName: fn.functionName,
      functionVersion: version.attrVersion,
    });
    liveAlias.cfnOptions.updatePolicy = {
      codeDeployLambdaAliasUpdate: {
        applicationName: application.ref,
        deploymentGroupName: deploymentGroup.ref,
      },
    };
    this.liveAlias = liveAlias;
    this.aliasArn = liveAlias.ref;

    // The interceptor door's own alias, on the version the deploy published: one alias per trust
    // domain. It moves at deploy time; CodeDeploy shifts `live` only.
    if (interceptor) {
      const a = new lambda.CfnAlias(this, 'InterceptorAlias', {
        name: 'interceptor',
        description: "The AgentCore Gateway interceptor's door, and no other",
        functionName: fn.functionName,
        functionVersion: version.attrVersion,
      });
      a.cfnOptions.condition = interceptor.onlyIf;
      this.interceptorAlias = a;
    }

    // ---- the dashboard ---------------------------------------------------------------------------
    const own = (metric: string, extra?: object) =>
      [METRICS_NAMESPACE, metric, 'Service', fn.functionName, ...(extra ? [extra] : [])];
    const search = (metric: string, qid: string) => [{
      expression: `SEARCH('{${METRICS_NAMESPACE},Service,Door,Tool} MetricName="${metric}" Service="${fn.functionName}"', 'Sum', 300)`,
      id: qid,
    }];
    const lambdaMetric = (metric: string, s: string) => ['AWS/Lambda', metric, 'FunctionName', fn.functionName, { stat: s }];
    const tableMetric = (metric: string) => ['AWS/DynamoDB', metric, 'TableName', table.ref, { stat: 'Sum' }];
    const graph = (x: number, y: number, title: string, rest: object) => ({
      type: 'metric', x, y, width: 12, height: 6,
      properties: { title, region: '${AWS::Region}', ...rest },
    });
    const body = {
      widgets: [
        { type: 'alarm', x: 0, y: 0, width: 24, height: 3, properties: {
          title: 'Alarms (runbook: docs/operations.md)',
          alarms: this.alarms.map((a) => a.attrArn),
        } },
        graph(0, 3, 'Calls by outcome', { stat: 'Sum', period: 60, view: 'timeSeries',
          metrics: ['executed', 'replayed', 'waited', 'in_progress', 'store_error', 'settled_unknown', 'outcome_unknown',
            'sessionless', 'shadow_replay', 'tool_error']
            .map((m) => own(m)) }),
        graph(12, 3, 'Replays by door and tool', { view: 'timeSeries', metrics: [search('replayed', 'replays')] }),
        graph(0, 9, 'Executions by door and tool', { view: 'timeSeries', metrics: [search('executed', 'executions')] }),
        graph(12, 9, 'Latency (ms)', { period: 60, view: 'timeSeries', metrics: [
          own('latency_ms', { stat: 'p50' }), own('latency_ms', { stat: 'p99' }), lambdaMetric('Duration', 'Maximum')] }),
        graph(0, 15, 'Executor invocations', { period: 60, view: 'timeSeries', metrics: [
          lambdaMetric('Invocations', 'Sum'), lambdaMetric('Errors', 'Sum'), lambdaMetric('Throttles', 'Sum'),
          lambdaMetric('ConcurrentExecutions', 'Maximum')] }),
        graph(12, 15, 'Idempotency table', { period: 60, view: 'timeSeries', metrics: [
          tableMetric('ConsumedWriteCapacityUnits'), tableMetric('ConsumedReadCapacityUnits'),
          tableMetric('WriteThrottleEvents'), tableMetric('ReadThrottleEvents'), own('store_requests', { stat: 'Sum' })] }),
      ],
    };
    this.dashboard = new cloudwatch.CfnDashboard(this, 'Dashboard', {
      dashboardName: props.dashboardName ?? `${cdk.Aws.STACK_NAME}-${cdk.Aws.REGION}`,
      dashboardBody: lazySub(JSON.stringify(body)),
    });

    // ---- the sweep: unsettled at-most-once claims, every five minutes (docs/operations.md) --------
    const sweep = new events.CfnRule(this, 'SweepSchedule', {
      description: 'toolcall-dedup sweep of unsettled at-most-once claims',
      scheduleExpression: 'rate(5 minutes)',
      state: 'ENABLED',
      targets: [{ id: 'sweep', arn: this.aliasArn, input: '{"toolcall-dedup": "sweep"}' }],
    });
    new lambda.CfnPermission(this, 'SweepInvokePermission', {
      action: 'lambda:InvokeFunction',
      functionName: this.aliasArn,
      principal: 'events.amazonaws.com',
      sourceAccount: cdk.Aws.ACCOUNT_ID,
      sourceArn: sweep.attrArn,
    });
  }

  /**
   * Let a Bedrock agent invoke the executor (its `live` alias), on its own behalf only. The source
   * account is the agent's (field 5 of its ARN), so a cross-account agent works.
   */
  public allowAgent(id: string, agentArn: string, options: { onlyIf?: cdk.CfnCondition; sourceAccount?: string } = {}) {
    return this.allowInvoke(id, 'bedrock.amazonaws.com', agentArn, options);
  }

  /** Let one AgentCore Gateway invoke the executor (its `live` alias) as a Lambda target. */
  public allowGateway(id: string, gatewayArn: string, options: { onlyIf?: cdk.CfnCondition; sourceAccount?: string } = {}) {
    return this.allowInvoke(id, 'bedrock-agentcore.amazonaws.com', gatewayArn, options);
  }

  private allowInvoke(id: string, principal: string, sourceArn: string,
    options: { onlyIf?: cdk.CfnCondition; sourceAccount?: string }): lambda.CfnPermission {
    const account = options.sourceAccount ?? (cdk.Token.isUnresolved(sourceArn)
      ? cdk.Fn.select(4, cdk.Fn.split(':', sourceArn)) : sourceArn.split(':')[4]);
    const permission = new lambda.CfnPermission(this, id, {
      action: 'lambda:InvokeFunction',
      functionName: this.aliasArn,
      principal,
      sourceAccount: account,
      sourceArn,
    });
    permission.cfnOptions.condition = options.onlyIf;
    return permission;
  }

  /**
   * One of the executor's outcome counts for the whole service (the alarms' view). Only
   * `executed`, `replayed`, `tool_error` and `outcome_unknown` are also published per door and
   * tool (`dimensionsMap: { Service, Door, Tool }`); docs/operations.md prices them.
   */
  public metricOutcome(outcome: Outcome, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName: outcome,
      dimensionsMap: { Service: this.dedupFunction.functionName },
      statistic: 'Sum',
      ...props,
    });
  }

  /** Invocation latency as the executor measures it (ms, event to answer). */
  public metricLatency(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
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
}
