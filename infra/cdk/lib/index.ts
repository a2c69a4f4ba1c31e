// What a CDK app imports: the ToolcallDedup construct and its types. The example stack
// (toolcall-dedup-stack.ts, the SAM template's twin) is exported for apps that want it whole.
export * from './toolcall-dedup';
export { ToolcallDedupStack } from './toolcall-dedup-stack';
