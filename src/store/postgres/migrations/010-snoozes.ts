/**
 * How many times a handler snoozed the job (`ctx.snooze`): its attempts given back, so
 * counted apart. Adds a column only: no function is replaced.
 */
export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
`;
