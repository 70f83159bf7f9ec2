/* fixture: a public header */
