//! Reading certificate files: each kind of bad file refused with the key, the file and why.
