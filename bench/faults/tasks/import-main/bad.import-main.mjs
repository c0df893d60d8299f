throw new Error('thrown at import');
