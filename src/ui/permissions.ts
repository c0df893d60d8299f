import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Action, Permissions } from './api.js';

/**
 * What the tab's token may do, for every page: a page leaves out the buttons of the
 * actions its token may not take. Until the token's scopes are known, none is shown.
 */
export const NO_PERMISSIONS: Permissions = { token: null, scopes: [], may: () => false };

export const PermissionsContext = createContext<Permissions>(NO_PERMISSIONS);

/** Whether the tab's token may take `action`. */
export function useMay(): (action: Action) => boolean {
  return useContext(PermissionsContext).may;
}
