/** How many times a handler snoozed the job (`ctx.snooze`): its attempts given back, so counted apart. */
export default `
ALTER TABLE jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
`;
