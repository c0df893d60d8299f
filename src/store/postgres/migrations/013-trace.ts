/**
 * The trace context a job or a batch was submitted in (src/tracing/trace-context.ts): a
 * W3C traceparent, then a space and the tracestate if any. Null for a request without
 * one while tracing is off. Adds columns only: no function is replaced, and a server of
 * the version before keeps working beside it (its inserts leave the column null).
 */
export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN trace text;
ALTER TABLE {{schema}}.batches ADD COLUMN trace text;
`;
