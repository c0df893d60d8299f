/** Width of one bucket of GET /v1/stats. */
export const STATS_BUCKET_MS = 10_000;
/** How far back GET /v1/stats reaches: an hour of buckets. */
export const STATS_MAX_WINDOW_SECONDS = 3600;
/** The shortest window GET /v1/stats answers for. */
export const STATS_MIN_WINDOW_SECONDS = 60;
