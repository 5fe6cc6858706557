/* librdmacm.so.1: its code is urvt_rdmacm (linked whole); nothing here. */
