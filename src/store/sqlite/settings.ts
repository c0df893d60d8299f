import type { FileState } from './file-state.js';
import type { Preparer } from './prepare.js';

/** The settings table: whether dispatch is paused, and the task limits' overrides. */

export function paused(file: FileState): boolean {
  return file.s.selectSetting.get('paused') === 'true';
}

export function setPaused(file: FileState, paused: boolean): null {
  file.s.upsertSetting.run('paused', String(paused));
  return null;
}

/** Settings whose key starts with `prefix`, as [key, value] pairs. */
export function settings(file: FileState, prefix: string): [string, string][] {
  return file.s.selectSettings
    .all(prefix)
    .filter((row) => row.key.startsWith(prefix))
    .map((row) => [row.key, row.value]);
}

/** Set a setting, or delete it (null). */
export function putSetting(file: FileState, key: string, value: string | null): null {
  if (value === null) file.s.deleteSetting.run(key);
  else file.s.upsertSetting.run(key, value);
  return null;
}

/** The statements of the settings table, prepared once. */
export function prepareSettingStatements({ pluck, prepare }: Preparer) {
  return {
    selectSetting: pluck<string>('SELECT value FROM settings WHERE key = ?'),
    // Keys from the prefix on (the caller checks the prefix; few settings exist).
    selectSettings: prepare<{ key: string; value: string }>(
      'SELECT key, value FROM settings WHERE key >= ? ORDER BY key',
    ),
    deleteSetting: prepare('DELETE FROM settings WHERE key = ?'),
    upsertSetting: prepare(
      'INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
    ),
  };
}
