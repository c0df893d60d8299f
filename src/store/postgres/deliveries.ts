/** Callback deliveries on PostgreSQL: leased to one server at a time, each attempt fenced. */
import type { DeliveryAttempt, DueDelivery } from '../store.js';
import type { DeliveryRecord } from '../../contract/delivery.js';
import type { Job } from '../../contract/job.js';
import type { Batch } from '../../contract/batch.js';
import type { StoreContext } from './context.js';
import { UUID } from './connection.js';
import { deliveryRecords, type DeliveryRow } from '../core/delivery-records.js';
import { dueDelivery, jobFromWire, type JobRow, toWire } from '../core/rows.js';

function deliveryStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    /**
     * Callback deliveries: lease up to $3 due ones that no live owner holds ($1 for $2 ms),
     * skipping rows another server is leasing this moment.
     */
    claimDeliveries: `
WITH due AS MATERIALIZED (
  SELECT id FROM ${s}.callback_deliveries
  WHERE status = 'pending' AND next_at <= ${now} AND (lease_expires_at IS NULL OR lease_expires_at <= ${now})
  ORDER BY next_at LIMIT $3
  FOR UPDATE SKIP LOCKED),
leased AS (
  UPDATE ${s}.callback_deliveries d SET lease_owner = $1, lease_expires_at = ${now} + $2
  FROM due WHERE d.id = due.id
  RETURNING d.id, d.job_id, d.event, d.attempts, d.body)
SELECT l.id::text AS id, l.job_id::text AS job_id, l.event, l.attempts, l.body,
  CASE WHEN l.event = 'batch.finished' THEN b.callback ELSE j.callback END AS callback
FROM leased l LEFT JOIN ${s}.jobs j ON j.id = l.job_id AND l.event <> 'batch.finished'
  LEFT JOIN ${s}.batches b ON b.id = l.job_id AND l.event = 'batch.finished'`,
    /** An attempt of delivery $1 (attempt $2, owner $3), fenced; $5: the delivery's status after it. */
    recordDelivery: `
WITH d AS (
  UPDATE ${s}.callback_deliveries SET status = $5, attempts = $2,
    next_at = CASE WHEN $5 = 'pending' THEN ${now} + $8 END, body = $4, lease_owner = NULL, lease_expires_at = NULL
  WHERE id = $1 AND status = 'pending' AND attempts = $2 - 1 AND lease_owner = $3
  RETURNING id)
INSERT INTO ${s}.callback_attempts (delivery_id, attempt, status, http_status, error, at)
SELECT id, $2, $9, $6, $7, ${now} FROM d RETURNING attempt`,
    nextDelivery: `SELECT min(greatest(next_at, coalesce(lease_expires_at, 0))) AS at FROM ${s}.callback_deliveries
      WHERE status = 'pending'`,
    deliveriesOf: `
SELECT d.id::text AS id, d.event, d.status, d.attempts, d.next_at, a.attempt, a.status AS attempt_status,
  a.http_status, a.error, a.at
FROM ${s}.callback_deliveries d LEFT JOIN ${s}.callback_attempts a ON a.delivery_id = d.id
WHERE d.job_id = $1 ORDER BY d.seq, a.attempt`,
  };
}

export class PgDeliveries {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof deliveryStatements>;

  /** Reads a batch as GET /v1/batches/{id} does: the body of its callback. */
  readonly #batch: (id: string) => Promise<Batch | null>;

  constructor(ctx: StoreContext, batch: (id: string) => Promise<Batch | null>) {
    this.#ctx = ctx;
    this.#sql = deliveryStatements(ctx.options.schema);
    this.#batch = batch;
  }

  async claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]> {
    const leased = await this.#ctx.db.query<{
      id: string;
      job_id: string;
      event: string;
      attempts: number;
      body: string | null;
      callback: string | null;
    }>(this.#sql.claimDeliveries, [owner, leaseMs, limit]);
    const firstOfJobs = leased.rows.filter((row) => row.body === null && row.event !== 'batch.finished');
    const first = firstOfJobs.map((row) => row.job_id);
    const batches = new Map<string, Batch | null>();
    for (const row of leased.rows) {
      if (row.body === null && row.event === 'batch.finished') batches.set(row.job_id, await this.#batch(row.job_id));
    }
    const jobs = new Map<string, Job>();
    if (first.length > 0) {
      for (const row of await this.#ctx.db.readByIds<JobRow>(this.#ctx.shared.getMany, first)) {
        jobs.set(row.id, jobFromWire(toWire(row)));
      }
    }
    return leased.rows.map((row) =>
      dueDelivery(
        {
          id: row.id,
          jobId: row.job_id,
          event: row.event,
          attempt: row.attempts + 1,
          callbackText: row.callback,
          body: row.body,
        },
        row.event === 'batch.finished' ? null : (jobs.get(row.job_id) ?? null),
        batches.get(row.job_id) ?? null,
      ),
    );
  }

  async recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean> {
    if (!UUID.test(attempt.id)) return false;
    const result = await this.#ctx.db.query(this.#sql.recordDelivery, [
      attempt.id,
      attempt.attempt,
      attempt.owner,
      attempt.body,
      attempt.outcome === 'retry' ? 'pending' : attempt.outcome,
      attempt.httpStatus,
      attempt.error,
      attempt.retryInMs,
      attempt.outcome === 'delivered' ? 'delivered' : 'failed',
    ]);
    return result.rowCount === 1;
  }

  async nextDeliveryAt(): Promise<number | null> {
    return (await this.#ctx.db.query<{ at: number | null }>(this.#sql.nextDelivery)).rows[0]?.at ?? null;
  }

  async deliveries(jobId: string): Promise<DeliveryRecord[] | null> {
    if (!UUID.test(jobId)) return null;
    const [job, rows] = await Promise.all([
      this.#ctx.db.readByIds(this.#ctx.shared.statusOf, jobId),
      this.#ctx.db.query<DeliveryRow>(this.#sql.deliveriesOf, [jobId]),
    ]);
    return job.length === 0 ? null : deliveryRecords(rows.rows);
  }
}
