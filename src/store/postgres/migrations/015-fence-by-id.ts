import { statusIs } from '../sql.js';
import finishFence from './007-finish-fence.js';

/**
 * The finish function as step 7 made it, with its UPDATE's status fence written so that no
 * partial index can serve it (`statusIs` in sql.ts): on a table analyzed while no job ran,
 * the planner read every entry of `jobs_running_type`, dead ones included, for each
 * finish, in place of finding the rows by their ids.
 */
const FENCE_BY_STATUS = "WHERE j.id = t.id AND j.status = 'running' AND";

if (!finishFence.includes(FENCE_BY_STATUS)) {
  throw new Error('migration 015: the finish function of migration 007 no longer holds the fence it rewrites');
}

export default finishFence.replace(FENCE_BY_STATUS, `WHERE j.id = t.id AND ${statusIs('j', 'running')} AND`);
