/**
 * The trace context a job or a batch was submitted in (src/tracing/trace-context.ts): a
 * W3C traceparent, then a space and the tracestate if any. Null for a request without
 * one while tracing is off. Adds columns only.
 */
export default `
ALTER TABLE jobs ADD COLUMN trace TEXT;
ALTER TABLE batches ADD COLUMN trace TEXT;
`;
