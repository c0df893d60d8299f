/** Settings that outlive a restart (whether dispatch is paused). */
export default `CREATE TABLE settings (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;`;
