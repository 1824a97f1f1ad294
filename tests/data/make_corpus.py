"""Regenerate `uitars_replies.jsonl`: realistic UI-TARS / Doubao / CODA-planner replies with hand-written expectations.

Run `python tests/data/make_corpus.py` from the repo root. Expectations are written in the model's own units
(absolute pixels in the smart-resized frame, or 0-1000) and converted to screen pixels here with the textbook
formulas (`x / w' * W` or `x / 1000 * W`), independently of `coda.actions`. Each entry also records how the
official parsers fare on it: `uitars014` / `uitars051` is `ok` (agrees with `expect`), `n/a` (out of its scope,
e.g. the CODA planner dialect), `rejects` (raises on text that is garbage anyway) or the names of the bugs it hits,
each documented by a `test_official_bug_<name>` in `tests/test_differential.py`.
"""
import json, math
from pathlib import Path

def _frame(W, H):
    "Qwen2.5-VL smart_resize of a W x H screenshot, as (w', h') (textbook rule, factor 28, default pixel limits)."
    f, lo, hi = 28, 100 * 28 * 28, 16384 * 28 * 28
    h, w = max(f, round(H / f) * f), max(f, round(W / f) * f)
    if h * w > hi:
        b = math.sqrt(H * W / hi); h, w = math.floor(H / b / f) * f, math.floor(W / b / f) * f
    elif h * w < lo:
        b = math.sqrt(lo / (H * W)); h, w = math.ceil(H * b / f) * f, math.ceil(W * b / f) * f
    return w, h

# expectation builders, coordinates in model units; a 4-tuple box means its centre
def _pt(p): return p if len(p) == 2 else ((p[0] + p[2]) / 2, (p[1] + p[3]) / 2)
def click(*p): return dict(kind='click', at=_pt(p))
def dbl(*p): return dict(kind='left_double', at=_pt(p))
def right(*p): return dict(kind='right_single', at=_pt(p))
def move(*p): return dict(kind='move', at=_pt(p))
def drag(a, b): return dict(kind='drag', at=_pt(a), to=_pt(b))
def scroll(direction, *p): return dict(kind='scroll', direction=direction, **({'at': _pt(p)} if p else {}))
def typ(text, enter=False): return dict(kind='type', text=text, **({'enter': True} if enter else {}))
def hotkey(*keys): return dict(kind='hotkey', keys=list(keys))
def finished(text=''): return dict(kind='finished', **({'text': text} if text else {}))
def answer(text): return dict(kind='answer', text=text)
def simple(kind): return dict(kind=kind)

S1, S2, S3 = (1280, 800), (1920, 1080), (2560, 1440)
ABS, REL = 'absolute', 'relative1000'
B = lambda x, y: f"<|box_start|>({x},{y})<|box_end|>"   # box tokens kept by the server

# (id, text, coords, screen, note, expect, uitars014, uitars051)
E = [
 # ---------------- UI-TARS-1.5-7B, CODA / ScienceBoard screen 1280x800 (frame 1288x812) ----------------
 ("kalgebra_click_center", "Thought: I need to switch to the 2D Graph tab in KAlgebra so that I can plot the function. The tab is in the middle of the top bar.\nAction: click(start_box='(644,406)')",
  ABS, S1, "box tokens stripped by vLLM (the usual case); frame centre -> screen centre", [click(644, 406)], "ok", "ok"),
 ("bug_item12_box_tokens", f"Thought: I need to switch to the 2D Graph tab in KAlgebra so that I can plot the function.\nAction: click(start_box='{B(644,406)}')",
  ABS, S1, "special tokens kept (skip_special_tokens=False); §1.7 item 12", [click(644, 406)], "box_tokens", "box_tokens"),
 ("kalgebra_type_expression_enter", "Thought: The console input box is focused. I'll type the expression and press Enter to evaluate it.\nAction: type(content='sin(x)*cos(x)\\n')",
  ABS, S1, "trailing \\n means type, then Enter once; ')' inside but not followed by a quote", [typ('sin(x)*cos(x)', True)], "ok", "enter_twice"),
 ("kalgebra_type_no_enter", "Thought: Type the function definition into the input field without submitting yet.\nAction: type(content='f(x) := x^2 + 3*x - 4')",
  ABS, S1, "content ends with a digit, no Enter", [typ('f(x) := x^2 + 3*x - 4')], "ok", "ok"),
 ("kalgebra_dblclick_variable", "Thought: To edit the variable 'a' I should double-click its row in the Variables panel on the right.\nAction: left_double(start_box='(1105,233)')",
  ABS, S1, "quote inside the thought", [dbl(1105, 233)], "ok", "ok"),
 ("kalgebra_right_click_plot", "Thought: Right-click the plot area to open the context menu with the export option.\nAction: right_single(start_box='(700,450)')",
  ABS, S1, "", [right(700, 450)], "ok", "ok"),
 ("kalgebra_hotkey_select_all", "Thought: To enter new text, first select all of the existing content in the input box.\nAction: hotkey(key='ctrl a')",
  ABS, S1, "", [hotkey('ctrl', 'a')], "ok", "ok"),
 ("kalgebra_finished", "Thought: The graph of sin(x)*cos(x) is now displayed in the 2D Graph tab, so the task is complete.\nAction: finished(content='The function is plotted.')",
  ABS, S1, "finished with content", [finished('The function is plotted.')], "ok", "ok"),
 ("chimerax_type_command_enter", "Thought: The ChimeraX command line at the bottom is active. I will type the command to fetch ubiquitin and run it.\nAction: type(content='open 1ubq\\n')",
  ABS, S1, "trailing newline -> Enter once", [typ('open 1ubq', True)], "ok", "enter_twice"),
 ("chimerax_click_command_line", f"Thought: First I need to focus the command line at the bottom of the ChimeraX window.\nAction: click(start_box='{B(400,783)}')",
  ABS, S1, "box tokens near the bottom edge", [click(400, 783)], "box_tokens", "box_tokens"),
 ("chimerax_type_quoted_selection", "Thought: I'll color the selected residues red with a command.\nAction: type(content='color /A:10-20 red; label /A:15 text \"Lys 15\"\\n')",
  ABS, S1, "escaped double quotes inside single-quoted content", [typ('color /A:10-20 red; label /A:15 text "Lys 15"', True)], "ok", "enter_twice"),
 ("bug_item3_051_quote_backslash_enter_twice", "Thought: Type the label text, which contains an apostrophe, and confirm.\nAction: type(content='it\\'s ok\\n')",
  ABS, S1, "§1.7 item 3: 0.5.1 pastes it\\'s with a backslash and presses Enter twice; 0.1.4 is right", [typ("it's ok", True)], "ok", "051_quote_backslash enter_twice"),
 ("chimerax_drag_rotate", "Thought: I will drag across the molecule view to rotate the structure by about ninety degrees.\nAction: drag(start_box='(500,400)', end_box='(800,400)')",
  ABS, S1, "horizontal drag", [drag((500, 400), (800, 400))], "ok", "ok"),
 ("chimerax_scroll_zoom", "Thought: Scroll up over the structure to zoom in.\nAction: scroll(start_box='(644,406)', direction='up')",
  ABS, S1, "scroll with a target", [scroll('up', 644, 406)], "ok", "051_scroll_unscaled"),
 ("bug_item8_arrowleft_in_combo", "Thought: Extend the selection one character to the left in the command line.\nAction: hotkey(key='shift arrowleft')",
  ABS, S1, "§1.7 item 8: arrowleft is only mapped when it is the whole hotkey", [hotkey('shift', 'left')], "arrowleft_in_combo", "arrowleft_in_combo"),
 ("chimerax_hotkey_arrowup_alone", "Thought: Recall the previous command from the history with the up arrow.\nAction: hotkey(key='arrowup')",
  ABS, S1, "arrowup alone is mapped by every copy", [hotkey('up')], "ok", "ok"),
 ("bug_item4_type_newline_uncompilable", "Thought: I'll enter two commands at once, one per line.\nAction: type(content='open 1ubq\\nsurface\\n')",
  ABS, S1, "§1.7 item 4: embedded newline -> 0.1.4 emits an unterminated string literal", [typ('open 1ubq\nsurface', True)], "type_newline_uncompilable", "enter_twice"),
 ("chimerax_call_user", "Thought: The PDB download needs a login that I don't have. I need to ask the user for credentials.\nAction: call_user()",
  ABS, S1, "", [simple('call_user')], "ok", "ok"),
 ("grass_click_layer_manager", "Thought: I need to open the raster map 'elevation' in GRASS GIS. I'll click on the 'Add raster map layer' button in the Layer Manager toolbar.\nAction: click(start_box='(38,67)')",
  ABS, S1, "", [click(38, 67)], "ok", "ok"),
 ("grass_type_mapcalc", "Thought: In the command console I'll compute NDVI with r.mapcalc.\nAction: type(content='r.mapcalc \"ndvi = float(nir - red) / (nir + red)\"\\n')",
  ABS, S1, "parentheses and double quotes in content", [typ('r.mapcalc "ndvi = float(nir - red) / (nir + red)"', True)], "ok", "enter_twice"),
 ("bug_item5_type_paren_quote", "Thought: Run a small Python snippet in the GRASS Python shell.\nAction: type(content='print(\\'hi\\')\\n')",
  ABS, S1, "§1.7 item 5: content contains ')' after an escaped quote; the official regex stops at the first ')", [typ("print('hi')", True)], "type_paren_quote", "type_paren_quote"),
 ("bug_item4_type_backslash_uncompilable", "Thought: Type the full path of the GeoTIFF file into the file name field.\nAction: type(content='C:\\\\Users\\\\data\\\\dem.tif')",
  ABS, S1, "§1.7 item 4: backslashes; 0.1.4 emits '\\U...' which is a unicode-escape SyntaxError", [typ('C:\\Users\\data\\dem.tif')], "type_backslash_uncompilable", "ok"),
 ("grass_scroll_down_map", "Thought: Scroll down in the layer list to find the 'roads' vector map.\nAction: scroll(start_box='(150,500)', direction='down')",
  ABS, S1, "", [scroll('down', 150, 500)], "ok", "051_scroll_unscaled"),
 ("grass_scroll_left_attribute_table", "Thought: The attribute table is wider than the window; scroll left to see the 'cat' column.\nAction: scroll(start_box='(640,500)', direction='left')",
  ABS, S1, "no official copy implements horizontal scroll", [scroll('left', 640, 500)], "no_hscroll", "no_hscroll"),
 ("grass_scroll_right_attribute_table", "Thought: Scroll right in the attribute table to reach the 'area' column.\nAction: scroll(start_box='(640,500)', direction='right')",
  ABS, S1, "no official copy implements horizontal scroll", [scroll('right', 640, 500)], "no_hscroll", "no_hscroll"),
 ("grass_drag_zoom_box", "Thought: Draw a zoom rectangle over the study area in the map display.\nAction: drag(start_box='(300,200)', end_box='(600,450)')",
  ABS, S1, "", [drag((300, 200), (600, 450))], "ok", "ok"),
 ("item12_box4_center_official_ok", "Thought: To adjust the region, next action is to click the \"Settings\" menu.\nAction: click(start_box='(116,58,197,90)')",
  ABS, S1, "(x1,y1,x2,y2) box: the centre is clicked", [click(116, 58, 197, 90)], "ok", "ok"),
 ("grass_wait_rendering", "Thought: The map is still rendering; I should wait for it to finish before continuing.\nAction: wait()",
  ABS, S1, "", [simple('wait')], "ok", "ok"),
 ("celestia_type_goto", "Thought: Press Enter opens the target field in Celestia; I'll type Mars and confirm.\nAction: type(content='Mars\\n')",
  ABS, S1, "", [typ('Mars', True)], "ok", "enter_twice"),
 ("celestia_hotkey_goto", "Thought: Press G to travel to the selected object.\nAction: hotkey(key='g')",
  ABS, S1, "single letter key", [hotkey('g')], "ok", "ok"),
 ("celestia_hotkey_space", "Thought: Pause the simulation time with the space bar.\nAction: hotkey(key='space')",
  ABS, S1, "official maps space to ' ', an equivalent pyautogui key", [hotkey('space')], "ok", "ok"),
 ("celestia_scroll_down_zoom", "Thought: Scroll down over the planet to zoom out.\nAction: scroll(start_box='(644,406)', direction='down')",
  ABS, S1, "", [scroll('down', 644, 406)], "ok", "051_scroll_unscaled"),
 ("celestia_scroll_no_box", "Thought: Scroll up to zoom in on Saturn.\nAction: scroll(direction='up')",
  ABS, S1, "scroll without a target: scroll where the mouse is", [scroll('up')], "ok", "ok"),
 ("celestia_drag_rotate_view", "Thought: Drag with the mouse to rotate the view around Earth.\nAction: drag(start_box='(400,300)', end_box='(420,520)')",
  ABS, S1, "", [drag((400, 300), (420, 520))], "ok", "ok"),
 ("celestia_hover_menu", "Thought: Hover over the Navigation menu to reveal its submenu.\nAction: hover(start_box='(95,12)')",
  ABS, S1, "hover -> move", [move(95, 12)], "ok", "ok"),
 ("celestia_finished_empty", "Thought: The view now shows Jupiter with its moons, which completes the task.\nAction: finished()",
  ABS, S1, "finished without content", [finished()], "ok", "ok"),
 ("office_click_then_type", "Thought: I'll click the Name box in LibreOffice Calc, then type the cell reference and press Enter.\nAction: click(start_box='(60,180)')\n\ntype(content='B12\\n')",
  ABS, S1, "two actions separated by a blank line", [click(60, 180), typ('B12', True)], "ok", "enter_twice"),
 ("office_three_actions", "Thought: Select the cell, copy it, and paste it into D2.\nAction: click(start_box='(200,240)')\n\nhotkey(key='ctrl c')\n\nclick(start_box='(420,240)')",
  ABS, S1, "three blank-line separated actions", [click(200, 240), hotkey('ctrl', 'c'), click(420, 240)], "ok", "ok"),
 ("bug_item7_action_without_space", "Thought: Open the File menu of LibreOffice Writer.\nAction:click(start_box='(25,40)')",
  ABS, S1, "§1.7 item 7: 'Action:' without a space", [click(25, 40)], "action_without_space", "action_without_space"),
 ("office_bare_action", "click(start_box='(644,406)')",
  ABS, S1, "bare action (the executor continues after a prefilled 'Action: ')", [click(644, 406)], "bare_action", "bare_action"),
 ("office_bare_type", "type(content='Hello, world!\\n')",
  ABS, S1, "bare type action", [typ('Hello, world!', True)], "bare_action", "bare_action"),
 ("office_hotkey_save_as", "Thought: Save the document under a new name with Ctrl+Shift+S.\nAction: hotkey(key='ctrl shift s')",
  ABS, S1, "three keys", [hotkey('ctrl', 'shift', 's')], "ok", "ok"),
 ("office_hotkey_enter", "Thought: Confirm the dialog by pressing Enter.\nAction: hotkey(key='enter')",
  ABS, S1, "", [hotkey('enter')], "ok", "ok"),
 ("office_select_alias", "Thought: Select the text from the start of the paragraph to the end of the line.\nAction: select(start_box='(120,300)', end_box='(980,300)')",
  ABS, S1, "select -> drag", [drag((120, 300), (980, 300))], "ok", "ok"),
 ("office_left_single_alias", "Thought: Click the Bold button in the toolbar.\nAction: left_single(start_box='(310,72)')",
  ABS, S1, "left_single -> click", [click(310, 72)], "ok", "ok"),
 ("office_click_spaces_in_box", "Thought: Click the OK button of the dialog.\nAction: click(start_box='(812, 530)')",
  ABS, S1, "space after the comma", [click(812, 530)], "ok", "ok"),
 ("office_click_edges", "Thought: Click the top-left corner of the screen, then the bottom-right corner, to wake both hot corners.\nAction: click(start_box='(0,0)')\n\nclick(start_box='(1288,812)')",
  ABS, S1, "frame corners map to screen corners", [click(0, 0), click(1288, 812)], "ok", "ok"),
 ("office_click_decimal", "Thought: Click the small checkbox next to 'Header row'.\nAction: click(start_box='(644.5,406.5)')",
  ABS, S1, "decimal coordinates in a box", [click(644.5, 406.5)], "ok", "ok"),
 ("office_type_unicode", "Thought: Type the unit symbol into the cell.\nAction: type(content='Ångström – 温度 °C\\n')",
  ABS, S1, "non-ASCII content", [typ('Ångström – 温度 °C', True)], "ok", "enter_twice"),
 ("bug_item6_single_newline_split", "Thought: Click the search field and type the query.\nAction: click(start_box='(900,40)')\ntype(content='protein')",
  ABS, S1, "§1.7 item 6: two calls separated by one newline", [click(900, 40), typ('protein')], "single_newline_split", "single_newline_split"),
 ("bug_item6_blank_line_in_content", "Thought: Type the two paragraphs into the document.\nAction: type(content='Results (draft)\n\nSee table 2.')",
  ABS, S1, "§1.7 item 6: raw newlines inside content, ')' followed by a blank line", [typ('Results (draft)\n\nSee table 2.')], "blank_line_in_content", "blank_line_in_content"),
 ("bug_item10_thought_triple_quote", "Thought: The editor shows the docstring '''Compute the area.''' on line 3; I will click at the end of that line.\nAction: click(start_box='(560,210)')",
  ABS, S1, "§1.7 item 10: the thought goes into a ''' docstring of the generated code", [click(560, 210)], "thought_triple_quote", "thought_triple_quote"),
 ("office_multiline_plan", "Thought: My plan:\n1. Open the Format menu.\n2. Choose Cells.\n3. Set the number format.\nFirst, I will click the Format menu in the menu bar.\nAction: click(start_box='(190,40)')",
  ABS, S1, "multi-line thought", [click(190, 40)], "ok", "ok"),
 ("office_action_word_in_thought", "Thought: My previous Action: click on the menu did nothing, so I will try the toolbar icon instead.\nAction: click(start_box='(350,72)')",
  ABS, S1, "'Action: ' inside the thought; the last one wins", [click(350, 72)], "ok", "ok"),
 ("office_trailing_whitespace", "Thought: Click Insert.\nAction: click(start_box='(140,40)')\n\n",
  ABS, S1, "trailing blank lines", [click(140, 40)], "ok", "ok"),
 ("office_chinese_thought", "Thought: 我需要点击“文件”菜单来保存文档。\nAction: click(start_box='(25,40)')",
  ABS, S1, "language=Chinese in the prompt", [click(25, 40)], "ok", "ok"),
 ("office_double_quoted_content", "Thought: Type the title.\nAction: type(content=\"Annual report\")",
  ABS, S1, "double-quoted content (seen from some servers' chat templates)", [typ('Annual report')], "double_quoted_content", "double_quoted_content"),
 ("office_type_action_label_in_content", "Thought: Type the column header into cell A1 and confirm.\nAction: type(content='Action: Review\\n')",
  ABS, S1, "'Action:' inside the typed content: the label search must not look inside the quoted string", [typ('Action: Review', True)], "action_label_in_content", "action_label_in_content"),
 ("coda_history_nested", "Thought: Click the Edit menu to find Preferences.\nAction: Thought: The Edit menu is at the top left of the KAlgebra window.\nAction: click(start_box='(70,40)')",
  ABS, S1, "CODA stored history: planner thought + 'Action: ' + executor reply", [click(70, 40)], "ok", "ok"),
 ("point_absolute_click", "Thought: Click the Calculator tab.\nAction: click(point='<point>644 406</point>')",
  ABS, S1, "<point> form (UI-TARS-1.5 under the Doubao prompt)", [click(644, 406)], "ok", "ok"),
 ("bug_item11_point_decimal", "Thought: Click the Calculator tab.\nAction: click(point='<point>644.5 406.5</point>')",
  ABS, S1, "§1.7 item 11: <point> with decimals", [click(644.5, 406.5)], "point_decimal", "point_decimal"),
 ("point_absolute_drag", "Thought: Move the slider to the right end.\nAction: drag(start_point='<point>300 600</point>', end_point='<point>900 600</point>')",
  ABS, S1, "start_point/end_point", [drag((300, 600), (900, 600))], "ok", "ok"),
 ("bug_item12_square_box", "Thought: Click the Run button.\nAction: click(start_box='[600, 380, 688, 432]')",
  ABS, S1, "§1.7 item 12: [x1, y1, x2, y2] (UI-TARS-desktop PR#28)", [click(600, 380, 688, 432)], "square_box", "square_box"),
 ("bug_item12_garbage_start_box_equals", "Thought: Click the button.\nAction: click(start_box='=')",
  ABS, S1, "§1.7 item 12: v1 garbage start_box='=' (UI-TARS#78)", [simple('invalid')], "rejects", "rejects"),
 ("garbage_prose", "I'm sorry, but I can't determine which element to click from this screenshot.",
  ABS, S1, "refusal without any action", [simple('invalid')], "rejects", "rejects"),
 ("garbage_truncated", "Thought: Click the Save button in the toolbar.\nAction: click(start_box='(",
  ABS, S1, "reply cut at max_tokens", [simple('invalid')], "rejects", "rejects"),
 # ---------------- UI-TARS-1.5-7B, OSWorld screen 1920x1080 (frame 1932x1092) ----------------
 ("osworld_click_center", "Thought: Click the Activities button.\nAction: click(start_box='(966,546)')",
  ABS, S2, "frame centre -> (960, 540)", [click(966, 546)], "ok", "ok"),
 ("osworld_click_box_tokens", f"Thought: Open the Terminal from the dock on the left.\nAction: click(start_box='{B(35,1000)}')",
  ABS, S2, "box tokens kept", [click(35, 1000)], "box_tokens", "box_tokens"),
 ("bug_item1_051_default_scale_factor", "Thought: Click the search bar.\nAction: click(start_box='(100,200)')",
  ABS, S2, "§1.7 item 1: 0.1.4 gives (99.379, 197.802); 0.5.1 with its default scale_factor gives (0.099, 0.198)", [click(100, 200)], "ok", "ok"),
 ("osworld_drag_file", "Thought: Drag the file report.pdf into the Documents folder.\nAction: drag(start_box='(420,380)', end_box='(150,290)')",
  ABS, S2, "", [drag((420, 380), (150, 290))], "ok", "ok"),
 ("osworld_drag_box_tokens", f"Thought: Resize the column by dragging its border.\nAction: drag(start_box='{B(512,300)}', end_box='{B(640,300)}')",
  ABS, S2, "box tokens in both boxes", [drag((512, 300), (640, 300))], "box_tokens", "box_tokens"),
 ("osworld_type_search_enter", "Thought: Type the search term and submit.\nAction: type(content='thunderbird settings\\n')",
  ABS, S2, "", [typ('thunderbird settings', True)], "ok", "enter_twice"),
 ("bug_item2_051_scroll_unscaled", "Thought: Scroll down the settings page to find Privacy.\nAction: scroll(start_box='(966,600)', direction='down')",
  ABS, S2, "§1.7 item 2: 0.5.1 leaves the scroll position normalized", [scroll('down', 966, 600)], "ok", "051_scroll_unscaled"),
 ("osworld_scroll_box4", "Thought: Scroll up inside the file list.\nAction: scroll(start_box='(300,200,700,600)', direction='up')",
  ABS, S2, "4-value scroll box: scroll at its centre", [scroll('up', 300, 200, 700, 600)], "ok", "051_scroll_unscaled"),
 ("osworld_hotkey_ctrl_c", "Thought: Copy the selected text.\nAction: hotkey(key='ctrl c')",
  ABS, S2, "", [hotkey('ctrl', 'c')], "ok", "ok"),
 ("osworld_hotkey_alt_f4", "Thought: Close the dialog window.\nAction: hotkey(key='alt f4')",
  ABS, S2, "", [hotkey('alt', 'f4')], "ok", "ok"),
 ("osworld_click_type_enter_multi", "Thought: Click the address bar, type the URL and go.\nAction: click(start_box='(640,75)')\n\ntype(content='https://www.rcsb.org/structure/1UBQ\\n')",
  ABS, S2, "click + type with Enter", [click(640, 75), typ('https://www.rcsb.org/structure/1UBQ', True)], "ok", "enter_twice"),
 ("osworld_finished_answer", "Thought: The spreadsheet now contains the totals in column E. The task is done.\nAction: finished(content='Totals added to column E')",
  ABS, S2, "", [finished('Totals added to column E')], "ok", "ok"),
 ("osworld_right_single", "Thought: Right-click the desktop to open the context menu.\nAction: right_single(start_box='(1500,700)')",
  ABS, S2, "", [right(1500, 700)], "ok", "ok"),
 ("osworld_action_no_space_type", "Thought: Type the password hint.\nAction:type(content='hint\\n')",
  ABS, S2, "§1.7 item 7 with type", [typ('hint', True)], "action_without_space", "action_without_space"),
 ("osworld_escaped_quote_only", "Thought: Type the name of the file.\nAction: type(content='Bob\\'s notes.txt')",
  ABS, S2, "escaped quote, no newline: 0.5.1 keeps the backslash", [typ("Bob's notes.txt")], "ok", "051_quote_backslash"),
 ("osworld_hotkey_arrowdown_combo", "Thought: Select to the end of the column.\nAction: hotkey(key='ctrl shift arrowdown')",
  ABS, S2, "§1.7 item 8 with arrowdown", [hotkey('ctrl', 'shift', 'down')], "arrowleft_in_combo", "arrowleft_in_combo"),
 # ---------------- 2560x1440 (frame 2548x1428) ----------------
 ("qhd_click", "Thought: Click the Apply button.\nAction: click(start_box='(2300,1350)')",
  ABS, S3, "frame smaller than the screen", [click(2300, 1350)], "ok", "ok"),
 ("qhd_drag", "Thought: Drag the window title bar to the right half.\nAction: drag(start_box='(1274,20)', end_box='(2000,20)')",
  ABS, S3, "", [drag((1274, 20), (2000, 20))], "ok", "ok"),
 # ---------------- UI-TARS v1 (Qwen2-VL) and Doubao: relative 0-1000 ----------------
 ("v1_click_center", "Thought: Click the Start button of the experiment wizard.\nAction: click(start_box='(500,500)')",
  REL, S2, "v1: 0-1000 relative", [click(500, 500)], "ok", "ok"),
 ("v1_click_box4", "Thought: Click the 'Open' button.\nAction: click(start_box='(410,520,470,560)')",
  REL, S2, "v1 often emits boxes", [click(410, 520, 470, 560)], "ok", "ok"),
 ("v1_reflection_summary", "Reflection: The previous click opened the wrong menu.\nAction_Summary: Close it and open the View menu instead.\nAction: click(start_box='(92,18)')",
  REL, S2, "v1 Reflection/Action_Summary layout", [click(92, 18)], "ok", "ok"),
 ("v1_type_enter", "Thought: Enter the coordinates of the target.\nAction: type(content='RA 10h 45m\\n')",
  REL, S1, "", [typ('RA 10h 45m', True)], "ok", "enter_twice"),
 ("v1_drag", "Thought: Drag the slider to the middle.\nAction: drag(start_box='(200,900)', end_box='(500,900)')",
  REL, S1, "", [drag((200, 900), (500, 900))], "ok", "ok"),
 ("v1_scroll_down", "Thought: Scroll down the results list.\nAction: scroll(start_box='(500,600)', direction='down')",
  REL, S1, "", [scroll('down', 500, 600)], "ok", "051_scroll_unscaled"),
 ("v1_hotkey", "Thought: Undo the last change.\nAction: hotkey(key='ctrl z')",
  REL, S1, "", [hotkey('ctrl', 'z')], "ok", "ok"),
 ("doubao_point_click", "Thought: 点击搜索框。\nAction: click(point='<point>200 300</point>')",
  REL, S2, "Doubao <point>, the ui-tars README example", [click(200, 300)], "ok", "ok"),
 ("doubao_point_drag", "Thought: Drag the layer to the top of the list.\nAction: drag(start_point='<point>120 640</point>', end_point='<point>120 210</point>')",
  REL, S2, "Doubao start_point/end_point", [drag((120, 640), (120, 210))], "ok", "ok"),
 ("doubao_point_scroll", "Thought: Scroll down the page.\nAction: scroll(point='<point>500 500</point>', direction='down')",
  REL, S2, "Doubao scroll with point=", [scroll('down', 500, 500)], "ok", "051_scroll_unscaled"),
 ("doubao_point_decimal", "Thought: Click the tiny close icon.\nAction: click(point='<point>987.5 12.5</point>')",
  REL, S2, "§1.7 item 11 in 0-1000 units", [click(987.5, 12.5)], "point_decimal", "point_decimal"),
 ("bug_item12_bbox", "Thought: Click the Submit button.\nAction: click(start_box='<bbox>450 880 550 920</bbox>')",
  REL, S2, "§1.7 item 12: <bbox> (only the 0.5.1 _v2 parser reads it)", [click(450, 880, 550, 920)], "bbox", "bbox"),
 ("doubao_finished", "Thought: 任务已完成。\nAction: finished(content='已保存')",
  REL, S2, "non-ASCII finished content", [finished('已保存')], "ok", "ok"),
 # ---------------- CODA planner (Qwen2.5-VL) replies ----------------
 ("planner_ans_fenced", "Thought: The result panel of KAlgebra shows 46368 for fib(24), which answers the question.\nAction: ```ANS 46368```",
  ABS, S1, "CODA planner answer in a code fence", [answer('46368')], "n/a", "n/a"),
 ("planner_ans_unfenced", "Thought: The atom count shown in the ChimeraX log is 5.\nAction: ANS 5",
  ABS, S1, "planner answer without backticks (crashes CODA, §2.5)", [answer('5')], "n/a", "n/a"),
 ("planner_ans_bare_fence", "```ANS 0.35```",
  ABS, S1, "bare fenced answer", [answer('0.35')], "n/a", "n/a"),
 ("planner_ans_word", "Thought: The status bar says the projection is UTM, so the answer is UTM.\nAction: ```ANS UTM```",
  ABS, S1, "text answer", [answer('UTM')], "n/a", "n/a"),
 ("planner_fail", "Thought: Celestia has no option to export a video in this build, so the task is infeasible.\nAction: FAIL",
  ABS, S1, "planner gives up", [simple('fail')], "n/a", "n/a"),
 ("planner_fail_fenced", "Thought: The requested layer does not exist in this GRASS location.\nAction: ```FAIL```",
  ABS, S1, "fenced FAIL", [simple('fail')], "n/a", "n/a"),
 ("planner_box4_action", "Thought: To adjust the time scale, next action is to click the \"Time\" menu.\nAction: click(start_box='(116,58,197,90)')",
  ABS, S1, "the planner prompt's own example", [click(116, 58, 197, 90)], "ok", "ok"),
]

def _to_screen(p, coords, screen):
    W, H = screen
    if coords == REL: return (round(p[0] / 1000 * W, 4), round(p[1] / 1000 * H, 4))
    w, h = _frame(W, H)
    return (round(p[0] / w * W, 4), round(p[1] / h * H, 4))

def _expect(e, coords, screen):
    d = {k: v for k, v in e.items() if k not in ('at', 'to')}
    if 'at' in e: d['x'], d['y'] = _to_screen(e['at'], coords, screen)
    if 'to' in e: d['x2'], d['y2'] = _to_screen(e['to'], coords, screen)
    return d

def rows():
    "The corpus as a list of dicts."
    out, seen = [], set()
    for id_, text, coords, screen, note, expect, u14, u51 in E:
        assert id_ not in seen, id_; seen.add(id_)
        out.append(dict(id=id_, text=text, coords=coords, screen=list(screen), note=note,
                        expect=[_expect(e, coords, screen) for e in expect], uitars014=u14, uitars051=u51))
    return out

if __name__ == '__main__':
    p = Path(__file__).with_name('uitars_replies.jsonl')
    p.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in rows()), encoding='utf-8')
    print(f'{len(E)} entries -> {p}')
